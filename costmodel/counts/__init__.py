"""Exact counts: the attention programs as einsum steps, their FLOPs and bytes derived symbolically (sympy), the
paper's Θ forms, and the compiled (cached) numeric forms of those counts.
"""

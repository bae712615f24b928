"""Whole models: presets and Hugging Face configs, a model's ops, its memory, one step priced, and requests under
static batching.
"""

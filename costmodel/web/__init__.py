"""``costmodel web``: the local page and its JSON API (typed fields, a guard on Host and origin, and bounded
worker processes).
"""

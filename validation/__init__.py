"""Validation of costmodel's predictions against real torch kernels (needs the ``validation`` extra)."""

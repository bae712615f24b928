"""Serving engines under load: engine configurations and defaults, one iteration's price, the iteration-level
simulation, the steady-state closed form and the served report.
"""

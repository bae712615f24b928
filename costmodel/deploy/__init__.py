"""Deployments: the most clients under targets, disaggregated prefill and decode pools, and the planner over
layouts on N devices.
"""

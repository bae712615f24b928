"""One attention workload: its shape, its roofline prediction op by op, sweeps over a dimension, and the
figures' data.
"""

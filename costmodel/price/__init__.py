"""The one price of an op on a device (:func:`costmodel.price.op.price`), where each efficiency parameter came from
(fitted, transferred or the datasheet's), and the measured ranges around a price.
"""

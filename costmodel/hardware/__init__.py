"""Devices: the hardware profile schema, the shipped catalog, kernel shapes (tiles and waves) and the named
mechanisms that turn counts into time on a device.
"""

"""Hardware profiles: one YAML file per device, shipped as package data (``costmodel.hardware_profiles``)."""

"""Model presets: one YAML file per model, shipped as package data (``costmodel.model_presets``)."""

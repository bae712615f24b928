"""Renderers: text tables, figures and the self-contained HTML page of a report. They compute nothing and read no
data file; they take reports (and the core) and give text or pictures.
"""

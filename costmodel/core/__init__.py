"""The base every floor stands on: errors, input checks, the vocabulary of names and defaults, file reading and
writing, the frozen report base, matplotlib set-up and fitted-parameter helpers. It imports only itself.
"""

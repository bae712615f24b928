"""The command line: one module per family of commands, and the options they share. Nothing imports it."""

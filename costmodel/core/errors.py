"""The one exception family of costmodel.

Every error a user can cause is a :class:`CostModelError` whose message names the offending value and
what would be valid; the CLI turns it into a single ``Error:`` line.
"""

from __future__ import annotations


class CostModelError(ValueError):
    """A user-facing error: bad dimensions, unknown names, unreadable files."""

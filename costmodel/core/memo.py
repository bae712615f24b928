"""Values made once per object while it lives: frozen profiles and grids are asked for the same derived value again
and again (a profile's power model, its JSON), and are not hashable cheaply."""

from __future__ import annotations

#: The most values a store keeps before it starts again.
MOST = 256


def per_object(store: dict, obj, key, make):
    """``make()`` for ``obj`` (and ``key``), made once: ``obj`` is kept beside its value, so that its id is not
    reused by another object while the value is kept; a store past :data:`MOST` values is emptied."""
    k = (id(obj), key)
    kept = store.get(k)
    if kept is None or kept[0] is not obj:
        if len(store) > MOST:
            store.clear()
        kept = store[k] = (obj, make())
    return kept[1]

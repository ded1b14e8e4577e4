"""The one exception runners raise: a valid spec that cannot become this launch."""

from __future__ import annotations


class LaunchError(ValueError):
    """A spec that validates but cannot be turned into this launch (a Kubernetes job
    without an image); the message is one line naming the field and what to write
    instead."""

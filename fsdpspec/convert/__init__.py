"""Converters between fsdpspec and other tools' config files."""

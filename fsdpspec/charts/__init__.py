"""Pictures: the run report and the plan's charts as self-contained HTML, SVG or PNG.

Drawn with matplotlib (the optional ``report`` extra), imported only here, so `validate`
and `plan` without chart flags never load it."""

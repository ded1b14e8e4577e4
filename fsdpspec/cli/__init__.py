"""The command line: a thin click layer, one module per subcommand."""

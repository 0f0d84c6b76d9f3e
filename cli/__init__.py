"""The ``densegate`` command line: one module per subcommand (see ``main``)."""

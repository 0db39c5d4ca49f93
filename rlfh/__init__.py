"""The ``rlfh`` command, the top layer: it imports every package's subcommand module (:mod:`rlfh.cli`), and
nothing imports it. The project's packages sit below it (``core`` <- ... <- ``bench``, tests/test_import_graph.py).
"""

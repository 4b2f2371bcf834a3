"""The command-line tools: ``hector`` (:mod:`~hector.tools.cli`, its argument types in
:mod:`~hector.tools.cli_args`) and ``hector-opt`` (:mod:`~hector.tools.opt`, the pass driver
with the reproducer and ``--verify-diagnostics``). They sit on top of every other layer and are
imported by none of them.
"""

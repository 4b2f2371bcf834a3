"""Conversions between levels, the named pipelines and the back ends (CPU JIT, PTX).

Importing this package registers nothing: each conversion and named pipeline registers when
its module is imported, which the pipeline parser does for the names a pipeline holds (the
table of pass modules, :data:`hector.passes.registry.PASS_MODULES`).
"""

"""Hector's native runtime (C++17, C ABI), loaded through ctypes.

The shared library ``libhector_runtime.so`` is built by the top-level CMakeLists.txt and
installed under ``<package dir>/lib``; :mod:`hector.runtime.native` finds and binds it. This
package imports nothing from the rest of Hector.
"""

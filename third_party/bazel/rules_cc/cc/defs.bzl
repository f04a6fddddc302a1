"""Offline stand-in for rules_cc's cc/defs.bzl.

Bazel 4.2.3 (Debian's bazel-bootstrap) loads these names from @rules_cc
while configuring the C/C++ toolchain. The real rules_cc is fetched from the
network, and Debian's bazel-rules-cc is too new for Bazel 4, so every name is
bound to the native rule built into Bazel 4 instead.
"""

cc_binary = native.cc_binary
cc_import = native.cc_import
cc_library = native.cc_library
cc_proto_library = native.cc_proto_library
cc_test = native.cc_test
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
fdo_prefetch_hints = native.fdo_prefetch_hints
fdo_profile = native.fdo_profile
objc_import = native.objc_import
objc_library = native.objc_library

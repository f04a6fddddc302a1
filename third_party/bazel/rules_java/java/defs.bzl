"""Offline stand-in for rules_java's java/defs.bzl.

Bazel 4.2.3 loads these names from @rules_java for its built-in JDK
toolchains even in a pure C project; binding them to Bazel 4's native rules
avoids fetching rules_java from the network.
"""

java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_lite_proto_library = native.java_lite_proto_library
java_package_configuration = native.java_package_configuration
java_plugin = native.java_plugin
java_proto_library = native.java_proto_library
java_runtime = native.java_runtime
java_test = native.java_test
java_toolchain = native.java_toolchain

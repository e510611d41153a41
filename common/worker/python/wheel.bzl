"""py_wheel: a Python package's files written as a wheel, offline, by det_build.py.

`py_wheel(name = "wheel", srcs = [...], strip_prefix = "common/worker/python",
pyproject = "//common/worker/python:pyproject.toml", typed = ["det"])` makes the directory
`<package>/<name>/` (a tree artifact: the wheel's file name carries the version, which only
pyproject.toml knows) holding one `NAME-VERSION-TAGS.whl`. Each file of `srcs` goes into the
wheel at its path relative to `strip_prefix`, as py_bundle (bundle.bzl) places it, so the
same `srcs` give the same tree in both. A file outside `strip_prefix` is an error naming it.
Each package directory in `typed` gets an empty PEP 561 `py.typed` marker in the wheel.
The writer runs under /usr/bin/python3 -I: the action needs no PATH and no site-packages.
"""

load(":bundle.bzl", "package_files")

def _py_wheel_impl(ctx):
    out = ctx.actions.declare_directory(ctx.attr.name)
    files = []
    specs = []
    for f, rel in package_files(ctx, "py_wheel"):
        files.append(f)
        specs.append("%s=%s" % (rel, f.path))
    args = ctx.actions.args()
    args.add("-I")
    args.add(ctx.file._writer)
    args.add("--pyproject", ctx.file.pyproject)
    args.add("--out-dir", out.path)
    args.add_all(ctx.attr.typed, before_each = "--typed")
    args.add_all(specs)
    ctx.actions.run(
        executable = "/usr/bin/python3",
        arguments = [args],
        inputs = files + [ctx.file.pyproject, ctx.file._writer],
        outputs = [out],
        mnemonic = "PyWheel",
        progress_message = "Writing the wheel %s" % out.short_path,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

py_wheel = rule(
    implementation = _py_wheel_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = True),
        "strip_prefix": attr.string(mandatory = True),
        "pyproject": attr.label(allow_single_file = [".toml"], mandatory = True),
        "typed": attr.string_list(),
        "_writer": attr.label(
            default = "//common/worker/python:det_build.py",
            allow_single_file = True,
        ),
    },
)

"""py_bundle: the files of a Python package tree, copied into one directory.

`py_bundle(name = "python", srcs = [...])` makes the directory `<package>/<name>/`
(a tree artifact) holding each file of `srcs` at its path relative to `strip_prefix`
(source and generated files alike), so that PYTHONPATH=bazel-bin/<package>/<name>
imports the package. A file outside `strip_prefix` is an error naming it.
"""

def _py_bundle_impl(ctx):
    out = ctx.actions.declare_directory(ctx.attr.name)
    prefix = ctx.attr.strip_prefix.rstrip("/") + "/"
    files = []
    commands = []
    for target in ctx.attr.srcs:
        for f in target.files.to_list():
            if not f.short_path.startswith(prefix):
                fail("py_bundle %s: %s is not under %s" % (ctx.label, f.short_path, prefix))
            rel = f.short_path[len(prefix):]
            files.append(f)
            commands.append('mkdir -p "$1/$(dirname %s)" && cp "%s" "$1/%s"' % (rel, f.path, rel))
    ctx.actions.run_shell(
        inputs = files,
        outputs = [out],
        arguments = [out.path],
        command = " && ".join(["mkdir -p \"$1\""] + commands),
        progress_message = "Bundling Python package into %s" % out.short_path,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

py_bundle = rule(
    implementation = _py_bundle_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = True),
        "strip_prefix": attr.string(mandatory = True),
    },
)

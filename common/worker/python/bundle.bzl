"""py_bundle: the files of a Python package tree, copied into one directory.

`py_bundle(name = "python", srcs = [...])` makes the directory `<package>/<name>/`
(a tree artifact) holding each file of `srcs` at its path relative to `strip_prefix`
(source and generated files alike), so that PYTHONPATH=bazel-bin/<package>/<name>
imports the package. A file outside `strip_prefix` is an error naming it.
"""

def package_files(ctx, rule_name):
    """[(file, path in the package)] of ctx.attr.srcs, relative to ctx.attr.strip_prefix; a
    file outside it fails the build, naming it. Shared by py_bundle and py_wheel, so that
    the same srcs give the same tree in both."""
    prefix = ctx.attr.strip_prefix.rstrip("/") + "/"
    out = []
    for target in ctx.attr.srcs:
        for f in target.files.to_list():
            if not f.short_path.startswith(prefix):
                fail("%s %s: %s is not under %s" % (rule_name, ctx.label, f.short_path, prefix))
            out.append((f, f.short_path[len(prefix):]))
    return out

def _py_bundle_impl(ctx):
    out = ctx.actions.declare_directory(ctx.attr.name)
    files = []
    commands = []
    for f, rel in package_files(ctx, "py_bundle"):
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

"""portable_tarball: det's portable release, det-VERSION-linux-x86_64.tar.gz, by build_tarball.sh.

`portable_tarball(name = "tarball", bin = "//deploy:bin", python = "//deploy:python",
srcs = [...])` makes the directory `<package>/<name>/` (a tree artifact: the file name
carries the version, which only `det-master --version` knows) holding the one tarball.
`srcs` are the other files build_tarball.sh reads (configs, systemd units, its templates).
The action runs with Bazel's fixed PATH (gcc, patchelf, readelf, nm, ldd, tar, gzip).
"""

def _portable_tarball_impl(ctx):
    out = ctx.actions.declare_directory(ctx.attr.name)
    bins = ctx.files.bin
    args = ctx.actions.args()
    args.add(bins[0].dirname)
    args.add(ctx.files.python[0].path)
    args.add(out.path)
    ctx.actions.run(
        executable = ctx.executable._builder,
        arguments = [args],
        inputs = bins + ctx.files.python + ctx.files.srcs,
        outputs = [out],
        use_default_shell_env = True,
        mnemonic = "PortableTarball",
        progress_message = "Making the portable release %s" % out.short_path,
    )
    return [DefaultInfo(files = depset([out]), runfiles = ctx.runfiles(files = [out]))]

portable_tarball = rule(
    implementation = _portable_tarball_impl,
    attrs = {
        "bin": attr.label(mandatory = True),
        "python": attr.label(mandatory = True),
        "srcs": attr.label_list(allow_files = True),
        "_builder": attr.label(
            default = "//deploy/portable:build_tarball.sh",
            allow_single_file = True,
            executable = True,
            cfg = "exec",
        ),
    },
)

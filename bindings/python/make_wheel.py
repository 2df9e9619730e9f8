"""Writes the lumen wheel from files already built, with the standard library only.

A wheel is a zip of the package's files and a .dist-info folder (METADATA, WHEEL, RECORD with
every file's sha256 and size), as packaging.python.org's "Binary distribution format" says.
The tag is the running interpreter's (cp311-cp311-linux_x86_64 for Debian 12's Python), so
run this with the Python the extension was built for.

    make_wheel.py --tag
        prints the wheel's tag
    make_wheel.py --version 0.4.0 --out DIR/lumen-0.4.0-TAG.whl lumen/x.py=/path/to/x.py ...
        writes the wheel: each argument is ARCHIVE_PATH=FILE
"""
import argparse
import base64
import hashlib
import sys
import sysconfig
import zipfile

NAME = "lumen"
SUMMARY = "Sessions for the recurrent state of linear-attention layers"
# Entries get a fixed date so that the same files make the same wheel.
DATE = (1980, 1, 1, 0, 0, 0)


def tag():
    """python-abi-platform of the running CPython, e.g. cp311-cp311-linux_x86_64."""
    python = "cp%d%d" % sys.version_info[:2]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s%s-%s" % (python, python, sys.abiflags, platform)


def metadata(version):
    return ("Metadata-Version: 2.1\nName: %s\nVersion: %s\nSummary: %s\n"
            "Requires-Python: ==%d.%d.*\n" % ((NAME, version, SUMMARY) + sys.version_info[:2]))


def wheel_file():
    return ("Wheel-Version: 1.0\nGenerator: lumen make_wheel.py\nRoot-Is-Purelib: false\n"
            "Tag: %s\n" % tag())


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d\n" % (path, digest, len(data))


def write(out, version, files):
    """files: (archive path, file path) pairs, in the order they are stored."""
    dist_info = "%s-%s.dist-info" % (NAME, version)
    entries = []
    for archive_path, path in files:
        with open(path, "rb") as source:
            entries.append((archive_path, source.read()))
    entries.append((dist_info + "/METADATA", metadata(version).encode()))
    entries.append((dist_info + "/WHEEL", wheel_file().encode()))
    record = "".join(record_line(path, data) for path, data in entries)
    record += dist_info + "/RECORD,,\n"
    entries.append((dist_info + "/RECORD", record.encode()))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as wheel:
        for archive_path, data in entries:
            info = zipfile.ZipInfo(archive_path, DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            executable = archive_path.endswith(".so") or ".so." in archive_path
            info.external_attr = (0o755 if executable else 0o644) << 16
            wheel.writestr(info, data)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tag", action="store_true", help="print the wheel's tag and exit")
    parser.add_argument("--version")
    parser.add_argument("--out")
    parser.add_argument("files", nargs="*", metavar="ARCHIVE_PATH=FILE")
    args = parser.parse_args()
    if args.tag:
        print(tag())
        return
    if not args.version or not args.out or not args.files:
        parser.error("--version, --out and the files are needed")
    write(args.out, args.version, [item.split("=", 1) for item in args.files])


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""lint.docs — what the docs name must exist (docs/style.md, "Docs").

Checks README.md, docs/**/*.md and the config examples against the tree and the built
binaries:
  1. every file or directory of the tree a doc names (a backticked path or a relative
     link such as `reserve/rsv_hold.c`, `deploy/sql/`, `tests/lint/*.sh`) exists, or is
     one git ignores (what the build and the tests write);
  2. every key a config example sets or shows (`key = value`, also commented out) is a
     setting of that service (its --help);
  3. every `key = value` a doc shows is a setting of some service, a field of the API
     (docs/openapi) or a setting of a program we run (Postgres, Redis; listed below);
  4. every ONSALE_GATEWAY_* / ONSALE_RESERVE_* variable a doc names is one the service
     reads (its --help) or one deploy/onsale reads.
Usage: docs.py SOURCE_DIR BUILD_DIR. Prints each finding as FILE:LINE: what; exit 1 if any.
"""
import glob
import os
import re
import subprocess
import sys

SRC, BUILD = sys.argv[1], sys.argv[2]
TOP = ("common/", "gateway/", "reserve/", "loadgen/", "deploy/", "tests/", "docs/",
       "debian/", ".ci/")
# Settings of other programs that the docs show in their own syntax.
FOREIGN = {"synchronous_commit", "synchronous_standby_names", "target_session_attrs",
           "wal_level", "max_wal_senders", "hot_standby", "maxmemory_policy",
           "appendonly", "appendfsync", "cluster_enabled", "number_sync_standbys"}
PLACEHOLDERS = {"key", "name"}  # "a `key = value` file"
findings = []


def note(path, line, what):
    findings.append(f"{os.path.relpath(path, SRC)}:{line}: {what}")


def help_of(binary):
    """(keys, env names) from a binary's --help."""
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    text = out.stdout + out.stderr
    return (set(re.findall(r"^  --([a-z0-9_]+)=", text, re.M)),
            set(re.findall(r"env: (ONSALE_[A-Z0-9_]+)", text)))


def docs():
    yield os.path.join(SRC, "README.md")
    yield from sorted(glob.glob(os.path.join(SRC, "docs", "**", "*.md"), recursive=True))


def lines(path):
    with open(path, encoding="utf-8") as f:
        yield from enumerate(f, 1)


def ignored(rel):
    """True for a path git ignores: one the build or a test writes (a report's out/ dir)."""
    p = subprocess.run(["git", "-C", SRC, "check-ignore", "-q", "--no-index", rel],
                       capture_output=True)
    return p.returncode == 0


def exists(rel, base):
    rel = re.sub(r"[:#].*$", "", rel).rstrip(".,;)")
    if not rel or ignored(rel):
        return True
    for root in (SRC, base):
        p = os.path.normpath(os.path.join(root, rel))
        # a module is named without its extension: `common/cm_proxy`
        if any(glob.glob(p + ext) for ext in ("", ".c", ".h")):
            return True
    return False


def check_paths(path):
    base = os.path.dirname(path)
    for n, text in lines(path):
        for tok in re.findall(r"`([^`\s]+)`", text):
            if tok.startswith(TOP) and not re.search(r"[<>{}$]|\.\.\.|…", tok):
                if not exists(tok, SRC):
                    note(path, n, f"names {tok}, which is not in the tree")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:|#", target):
                continue
            if not exists(target, base):
                note(path, n, f"links to {target}, which is not in the tree")


def openapi_fields():
    fields = set()
    for y in glob.glob(os.path.join(SRC, "docs", "openapi", "*.yaml")):
        with open(y, encoding="utf-8") as f:
            fields |= set(re.findall(r"^\s+([a-z][a-z0-9_]*):", f.read(), re.M))
    return fields


def main():
    gw_keys, gw_env = help_of(os.path.join(BUILD, "gateway", "onsale-gateway"))
    rsv_keys, rsv_env = help_of(os.path.join(BUILD, "reserve", "onsale-reserve"))
    with open(os.path.join(SRC, "deploy", "onsale"), encoding="utf-8") as f:
        script_env = set(re.findall(r"ONSALE_[A-Z0-9_]+", f.read()))
    for lib in glob.glob(os.path.join(SRC, "deploy", "lib", "*")):
        with open(lib, encoding="utf-8", errors="replace") as f:
            script_env |= set(re.findall(r"ONSALE_[A-Z0-9_]+", f.read()))
    known = gw_keys | rsv_keys | openapi_fields() | FOREIGN | PLACEHOLDERS
    for example, keys in (("gateway.conf.example", gw_keys), ("reserve.conf.example", rsv_keys)):
        path = os.path.join(SRC, "deploy", example)
        for n, text in lines(path):
            m = re.match(r"^#?\s*([a-z][a-z0-9_]*)\s*=", text)
            if m and m.group(1) not in keys:
                note(path, n, f"sets {m.group(1)}, which is no setting of this service")
    for path in docs():
        check_paths(path)
        for n, text in lines(path):
            for key in re.findall(r"`([a-z][a-z0-9_]*) = [^`(]*`", text):
                if key not in known:
                    note(path, n, f"shows `{key} = …`, which no service, API field or "
                                  "program we run knows")
            for var in re.findall(r"\bONSALE_(?:GATEWAY|RESERVE)_[A-Z0-9_]+", text):
                if var not in gw_env | rsv_env | script_env:
                    note(path, n, f"names {var}, which nothing reads")
    for f in findings:
        print(f)
    print(f"lint.docs: {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

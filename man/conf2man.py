#!/usr/bin/env python3
"""gpusysd.conf(5) from config/gpusysd.conf itself: the example file documents
every key with its default (tests/daemon/test_config.c checks that), so the
manual is built from it and cannot drift. The keys a reload applies are read
from daemon/reload.c's LIVE_KEYS, the table the daemon itself applies.
Usage: conf2man.py CONF VERSION OUT RELOAD_C"""
import re
import sys

conf, version, out, reload_c = sys.argv[1:5]
lines = open(conf, encoding="utf-8").read().splitlines()


def live_keys(path):
    """The X(key) list of reload.c's LIVE_KEYS macro, in its order."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r"#define LIVE_KEYS\(X\)((?:[^\n]*\\\n)*[^\n]*)", text)
    if not m:
        sys.exit("conf2man: no LIVE_KEYS(X) in %s" % path)
    keys = re.findall(r"X\((\w+)\)", m.group(1))
    if not keys:
        sys.exit("conf2man: LIVE_KEYS of %s is empty" % path)
    return keys


live = live_keys(reload_c)


def esc(t):
    t = t.replace("\\", "\\e")
    return ("\\&" + t) if t.startswith((".", "'")) else t


# Blocks: comment lines, then the "#key = value" lines they explain.
blocks, prose, keys = [], [], []
for l in lines + [""]:
    m = re.match(r"^#([a-z_]+) = (.*)$", l)
    if m:
        keys.append((m.group(1), m.group(2)))
    elif l.startswith("#"):
        if keys:
            blocks.append((prose, keys))
            prose, keys = [], []
        prose.append(l[1:].strip())
    else:
        if keys or prose:
            blocks.append((prose, keys))
        prose, keys = [], []

head, rest = blocks[0], blocks[1:]
o = [
    '.\\" SPDX-License-Identifier: MIT',
    '.\\" Generated from config/gpusysd.conf by man/conf2man.py: edit that file.',
    '.TH GPUSYSD.CONF 5 "2026-11-24" "gpusysd %s" "File Formats Manual"' % version,
    ".SH NAME",
    "gpusysd.conf \\- settings of gpusysd",
    ".SH SYNOPSIS",
    "\\fIsysconfdir\\fR/gpusysd/gpusysd.conf (gpusysd \\fB\\-\\-config\\fR names another)",
    ".SH DESCRIPTION",
]
o += [esc(p) if p else ".PP" for p in head[0]]
o += [
    ".PP",
    "Every key may also be set in gpusysd's environment as",
    "\\fBGPUSYSD_\\fIKEY\\fR (upper case), which overrides the file.",
    "\\fBgpusysd \\-\\-check\\-config\\fR [\\fIFILE\\fR] reads a file as a start would",
    "and exits 0, or 78 with \\fIFILE\\fB:\\fILINE\\fB:\\fR \\fIwhy\\fR.",
    "On SIGHUP (\\fBsystemctl reload gpusysd\\fR) the daemon reads and checks the",
    "file again as \\fB\\-\\-check\\-config\\fR does. These %d settings apply at once"
    % len(live),
    "(to clients that attach afterwards, and the per-user bounds to every user):",
    ", ".join("\\fB%s\\fR" % k for k in live[:-1]) + " and \\fB%s\\fR." % live[-1],
    "Every other changed key is named in the log as taking effect at the next",
    "start. An invalid file, a changed \\fBmetrics_listen\\fR that cannot be bound",
    "now, or a missing \\fB\\-\\-config\\fR file keeps the settings in use (the log",
    "says \\fIFILE\\fB:\\fILINE\\fB:\\fR \\fIwhy\\fR); a missing default file means the",
    "defaults, as at start.",
    ".SH SETTINGS",
]
for prose, keys in rest:
    if not keys:
        o += [".PP"] + [esc(p) for p in prose if p]
        continue
    for i, (k, v) in enumerate(keys):
        o.append(".TP" if i == 0 else ".TQ")
        o.append("\\fB%s\\fR = \\fI%s\\fR" % (k, esc(v)))
    o += [esc(p) for p in prose if p] or ["(no description)"]
o += [
    ".SH FILES",
    "The example installed as the default file has every setting, commented",
    "out, at its default.",
    ".SH SEE ALSO",
    "gpusysd(8), gpusysctl(1), libgpusys(3)",
]
open(out, "w", encoding="utf-8").write("\n".join(o) + "\n")

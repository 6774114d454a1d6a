#!/usr/bin/env python3
"""gpusysd.conf(5) from config/gpusysd.conf itself: the example file documents
every key with its default (tests/daemon/test_config.c checks that), so the
manual is built from it and cannot drift. Usage: conf2man.py CONF VERSION OUT"""
import re
import sys

conf, version, out = sys.argv[1:4]
lines = open(conf, encoding="utf-8").read().splitlines()


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
    "On SIGHUP (\\fBsystemctl reload gpusysd\\fR) the daemon reads the file again:",
    "max_clients_per_uid, max_ports, channel_bulk_bytes, client_mem_budget and",
    "max_pending_calls apply to clients that attach afterwards; every other",
    "changed key is named in the log as taking effect at the next start; an",
    "invalid or missing file keeps the settings in use.",
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

/* SPDX-License-Identifier: MIT */
/*
 * Issue 32, "docs kept true by tests": every gpusysctl command and option
 * that README.md and gpusysctl(1) name exists and does what they say. The
 * commands are read from the documents themselves (the COMMANDS and OPTIONS
 * sections of man/gpusysctl.1; in README.md, `gpusysctl CMD` and the
 * backticked commands of a paragraph about gpusysctl) and each is run
 * against a real gpusysd: bare, with each option it is documented with, and
 * with --json, which the manual says every command takes. Each must exit
 * 0. gpusysctl --help's commands must be in the manual too.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "../daemon/harness.h"

#define MAX_SPECS 64
/* Emulated GPUs, one per gpu-fail run (a failed GPU cannot fail again). */
static const char *const gpu_uuid[] = {
	"GPU-d0c5d0c5-0000-4000-8000-000000000001", "GPU-d0c5d0c5-0000-4000-8000-000000000002",
	"GPU-d0c5d0c5-0000-4000-8000-000000000003", "GPU-d0c5d0c5-0000-4000-8000-000000000004",
	"GPU-d0c5d0c5-0000-4000-8000-000000000005", "GPU-d0c5d0c5-0000-4000-8000-000000000006",
};

struct specs {
	unsigned n;
	char text[MAX_SPECS][128]; /* "watch [--interval MS] [--count N]" */
	char from[MAX_SPECS][32];  /* which document said it */
};

static void add_spec(struct specs *s, const char *text, const char *from)
{
	for (unsigned i = 0; i < s->n; i++)
		if (!strcmp(s->text[i], text))
			return;
	assert_true(s->n < MAX_SPECS);
	snprintf(s->text[s->n], sizeof(s->text[0]), "%s", text);
	snprintf(s->from[s->n++], sizeof(s->from[0]), "%s", from);
}

static char *slurp(const char *rel)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/%s", test_env("GPUSYS_SOURCE_ROOT"), rel);
	FILE *f = fopen(path, "r");
	if (!f)
		fail_msg("cannot read %s", path);
	char *buf = calloc(1, 1 << 20);
	assert_non_null(buf);
	size_t n = fread(buf, 1, (1 << 20) - 1, f);
	buf[n] = 0;
	fclose(f);
	return buf;
}

/* A roff macro line as plain text: ".BR latency \" [\fB\-\-histogram\fR]\""
 * is "latency [--histogram]". */
static void roff_plain(const char *line, char *out, size_t len)
{
	const char *p = line;
	if (*p == '.')
		p += strcspn(p, " ");
	size_t n = 0;
	for (; *p && n + 1 < len; p++) {
		if (p[0] == '\\' && p[1] == 'f' && p[2]) {
			p += 2; /* \fB, \fR, \fI */
			continue;
		}
		if (p[0] == '\\' && p[1] == '-') {
			out[n++] = '-';
			p++;
			continue;
		}
		if (*p == '"')
			continue;
		if (*p == ' ' && (n == 0 || out[n - 1] == ' '))
			continue;
		out[n++] = *p;
	}
	while (n && out[n - 1] == ' ')
		n--;
	out[n] = 0;
}

/* gpusysctl(1): the tag lines of COMMANDS and OPTIONS. */
static void man_specs(struct specs *cmds, struct specs *opts)
{
	char *text = slurp("man/gpusysctl.1");
	struct specs *into = NULL;
	bool tag = false;
	for (char *save, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (!strncmp(l, ".SH ", 4)) {
			into = !strcmp(l, ".SH COMMANDS") ? cmds : !strcmp(l, ".SH OPTIONS") ? opts : NULL;
			continue;
		}
		if (!into)
			continue;
		if (!strcmp(l, ".TP")) {
			tag = true;
			continue;
		}
		if (tag) {
			char plain[128];
			roff_plain(l, plain, sizeof(plain));
			/* "--version, --help": two options. */
			for (char *s2, *o = strtok_r(plain, ",", &s2); o; o = strtok_r(NULL, ",", &s2)) {
				while (*o == ' ')
					o++;
				for (size_t k = strlen(o); k && o[k - 1] == ' ';)
					o[--k] = 0;
				add_spec(into, o, "gpusysctl.1");
			}
			tag = false;
		}
	}
	free(text);
}

/* A command as README writes it in backticks: a lower-case word (letters
 * and '-') and bracketed options, or an option; not a key (admin_group),
 * a file (control.sock), a program or a phrase. */
static bool looks_like_command(const char *s, bool named)
{
	if (!strncmp(s, "--", 2))
		return strspn(s + 2, "abcdefghijklmnopqrstuvwxyz-") == strlen(s + 2);
	size_t w = strspn(s, "abcdefghijklmnopqrstuvwxyz-");
	if (w == 0 || !islower((unsigned char)s[0]))
		return false;
	/* The project's programs and packages (`gpusysd`, `libgpusys-dev`),
	 * named beside gpusysctl: never one of its commands. */
	if (!strncmp(s, "gpusys", 6) || !strncmp(s, "libgpusys", 9))
		return false;
	/* Beside gpusysctl, only "cmd" or "cmd [--option...]": a span with
	 * other words (`adduser USER gpusys`) is some other program's. */
	return s[w] == 0 || (s[w] == ' ' && (named || s[w + 1] == '['));
}

/* README.md: `gpusysctl CMD ...` anywhere; and in a paragraph, bullet or
 * table row that names gpusysctl, every backticked command of it. */
static unsigned readme_specs(struct specs *cmds, struct specs *opts)
{
	unsigned found = 0;
	char *text = slurp("README.md");
	char *para = text;
	while (para && *para) {
		/* A paragraph ends at a blank line, a new bullet or a table row. */
		char *end = para;
		for (;;) {
			char *nl = strchr(end, '\n');
			if (!nl) {
				end += strlen(end);
				break;
			}
			end = nl + 1;
			if (*end == '\n' || !strncmp(end, "- ", 2) || *end == '|' || !*end)
				break;
		}
		char saved = *end;
		*end = 0;
		/* About gpusysctl's commands: it names one (`gpusysctl status`)
		 * or lists them (`gpusysctl`: `status`, ...); the spans after
		 * that. Other mentions (`gpusysctl` (status...) in the suites'
		 * table, a package's contents) list no commands. */
		char *first = strstr(para, "`gpusysctl ");
		char *list = strstr(para, "`gpusysctl`:");
		char *from = first && (!list || first < list) ? first : list;
		for (char *q = strchr(para, '`'); q; q = strchr(q, '`')) {
			bool about_ctl = from && q >= from;
			char *close = strchr(q + 1, '`');
			if (!close)
				break;
			char span[160];
			snprintf(span, sizeof(span), "%.*s", (int)(close - q - 1), q + 1);
			q = close + 1;
			bool named = !strncmp(span, "gpusysctl ", 10);
			if (named)
				memmove(span, span + 10, strlen(span + 10) + 1);
			else if (!about_ctl)
				continue;
			if (!looks_like_command(span, named))
				continue;
			found++;
			if (!strncmp(span, "--", 2))
				add_spec(opts, span, "README.md");
			else
				add_spec(cmds, span, "README.md");
		}
		*end = saved;
		para = end;
	}
	free(text);
	return found;
}

struct run {
	const char *argv[24];
	int n;
};

static void push(struct run *r, const char *a)
{
	assert_true(r->n < 22);
	r->argv[r->n++] = a;
}

/* A placeholder of the manual, as the test fills it in. */
static const char *fill(const char *word, const struct gd *d, unsigned *gpu)
{
	if (!strcmp(word, "MS"))
		return "100";
	if (!strcmp(word, "N"))
		return "2";
	if (!strcmp(word, "DIR"))
		return d->runtime;
	if (!strcmp(word, "REASON"))
		return "docs test";
	if (!strcmp(word, "UUID")) {
		assert_true(*gpu < sizeof(gpu_uuid) / sizeof(gpu_uuid[0]));
		return gpu_uuid[(*gpu)++];
	}
	return NULL;
}

/* Run "CMD [OPT VALUE]..." as the spec says (optional parts included when
 * with_optional), plus extra; exit 0 expected. */
static unsigned run_spec(const struct gd *d, const char *spec, bool with_optional, const char *extra, unsigned *gpu,
			 const char *from)
{
	char buf[128], *words[16];
	int nw = 0;
	snprintf(buf, sizeof(buf), "%s", spec);
	for (char *s, *w = strtok_r(buf, " ", &s); w && nw < 16; w = strtok_r(NULL, " ", &s))
		words[nw++] = w;
	struct run r = { .n = 0 };
	push(&r, test_env("GPUSYSCTL_BIN"));
	push(&r, "--runtime-dir");
	push(&r, d->runtime);
	bool watch = !strcmp(words[0], "watch");
	for (int i = 0; i < nw; i++) {
		char *w = words[i];
		bool optional = strchr(w, '[') || strchr(w, ']');
		/* "[--interval" "MS]": strip the brackets. */
		char *b;
		while ((b = strpbrk(w, "[]")))
			memmove(b, b + 1, strlen(b));
		if (optional && !with_optional)
			continue;
		const char *v = fill(w, d, gpu);
		if (!v && isupper((unsigned char)w[0]))
			fail_msg("%s: placeholder '%s' of '%s' unknown to this test", from, w, spec);
		push(&r, v ? v : w);
	}
	/* watch runs until ^C unless counted. */
	if (watch && !(with_optional && strstr(spec, "--count"))) {
		push(&r, "--count");
		push(&r, "2");
		push(&r, "--interval");
		push(&r, "100");
	}
	if (extra)
		push(&r, extra);
	r.argv[r.n] = NULL;
	char *out, *err, line[512] = "";
	for (int i = 3; i < r.n; i++)
		snprintf(line + strlen(line), sizeof(line) - strlen(line), " %s", r.argv[i]);
	int st = run_capture_ms(r.argv, 10000, &out, &err);
	unsigned bad = 0;
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		print_error("%s documents `gpusysctl%s`: exit %d, %s\n", from, line, WIFEXITED(st) ? WEXITSTATUS(st) : -1,
			    err);
		bad = 1;
	} else {
		print_message("ok: gpusysctl%s (%s)\n", line, from);
	}
	free(out), free(err);
	return bad;
}

static void test_documented_commands(void **state)
{
	(void)state;
	struct specs cmds = { 0 }, opts = { 0 };
	man_specs(&cmds, &opts);
	unsigned from_man = cmds.n, opts_man = opts.n;
	unsigned in_readme = readme_specs(&cmds, &opts);
	/* The extraction itself must find the commands; an empty list would
	 * pass anything. */
	if (from_man < 8 || opts_man < 3 || in_readme < 8)
		fail_msg("found %u commands and %u options in gpusysctl.1, %u in README.md: the parsing broke",
			 from_man, opts_man, in_readme);

	char config[1024] = "pollers = 1\nemulated_gpus = ";
	for (size_t i = 0; i < sizeof(gpu_uuid) / sizeof(gpu_uuid[0]); i++)
		snprintf(config + strlen(config), sizeof(config) - strlen(config), "%s%s", i ? "," : "", gpu_uuid[i]);
	strcat(config, "\n");
	struct gd d;
	gd_start(&d, config);

	unsigned bad = 0, gpu = 0;
	bool json_everywhere = false;
	for (unsigned i = 0; i < opts.n; i++)
		json_everywhere |= !strcmp(opts.text[i], "--json");
	/* gpu-fail last: it fails a GPU. */
	for (int pass = 0; pass < 2; pass++) {
		for (unsigned i = 0; i < cmds.n; i++) {
			if ((strncmp(cmds.text[i], "gpu-fail", 8) == 0) != (pass == 1))
				continue;
			bad += run_spec(&d, cmds.text[i], false, NULL, &gpu, cmds.from[i]);
			if (strchr(cmds.text[i], '['))
				bad += run_spec(&d, cmds.text[i], true, NULL, &gpu, cmds.from[i]);
			if (json_everywhere)
				bad += run_spec(&d, cmds.text[i], true, "--json", &gpu, "gpusysctl.1 (--json)");
		}
	}
	/* The options that stand alone. */
	for (unsigned i = 0; i < opts.n; i++) {
		if (strcmp(opts.text[i], "--version") && strcmp(opts.text[i], "--help"))
			continue;
		const char *argv[] = { test_env("GPUSYSCTL_BIN"), opts.text[i], NULL };
		char *out, *err;
		int st = run_capture(argv, &out, &err);
		if (st != 0) {
			print_error("%s: `gpusysctl %s` exit %d\n", opts.from[i], opts.text[i], st);
			bad++;
		}
		free(out), free(err);
	}
	/* Every option the manual names is one gpusysctl takes: used above
	 * (--json, --runtime-dir) or alone (--version, --help). */
	for (unsigned i = 0; i < opts.n; i++) {
		const char *o = opts.text[i];
		if (strncmp(o, "--json", 6) && strncmp(o, "--runtime-dir", 13) && strcmp(o, "--version") &&
		    strcmp(o, "--help")) {
			print_error("%s names option '%s', which this test does not know how to run\n", opts.from[i], o);
			bad++;
		}
	}
	/* The other way: every command of gpusysctl --help is in the manual. */
	const char *help[] = { test_env("GPUSYSCTL_BIN"), "--help", NULL };
	char *out, *err;
	assert_int_equal(run_capture(help, &out, &err), 0);
	char *cmdsec = strstr(out, "Commands:\n");
	assert_non_null(cmdsec);
	for (char *save, *l = strtok_r(cmdsec + 10, "\n", &save); l && *l; l = strtok_r(NULL, "\n", &save)) {
		if (strncmp(l, "  ", 2) || l[2] == ' ')
			continue; /* continuation lines */
		if (l[2] == '-')
			break; /* the options */
		char name[32];
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(l + 2, " "), l + 2);
		bool documented = false;
		for (unsigned i = 0; i < from_man; i++)
			documented |= !strncmp(cmds.text[i], name, strlen(name)) &&
				      (cmds.text[i][strlen(name)] == 0 || cmds.text[i][strlen(name)] == ' ');
		if (!documented) {
			print_error("gpusysctl --help lists '%s', gpusysctl.1 does not\n", name);
			bad++;
		}
	}
	free(out), free(err);
	gd_finish(&d);
	assert_int_equal(bad, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_documented_commands),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}

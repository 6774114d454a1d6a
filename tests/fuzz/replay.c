/* SPDX-License-Identifier: MIT */
/*
 * Replays a fuzzing corpus through a harness's LLVMFuzzerTestOneInput
 * without libFuzzer, so that every build (plain, ASan/UBSan) runs the seeds
 * and every input that ever found a bug as an ordinary test.
 *
 *     replay_NAME DIR|FILE...
 *
 * Exit 0 when every input ran (a crash or a sanitizer report ends the
 * process first); 1 when no input was found at all: a corpus that went
 * missing must not pass silently.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		return -1;
	}
	size_t cap = 4096, n = 0;
	uint8_t *buf = malloc(cap);
	for (;;) {
		if (!buf)
			abort();
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap)
			break;
		cap *= 2;
		buf = realloc(buf, cap);
	}
	fclose(f);
	/* An exact-size copy, so ASan sees reads past the input's end. */
	uint8_t *in = malloc(n ? n : 1);
	if (!in)
		abort();
	memcpy(in, buf, n);
	free(buf);
	LLVMFuzzerTestOneInput(in, n);
	free(in);
	return 0;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
	unsigned ran = 0;

	for (int i = 1; i < argc; i++) {
		struct stat st;
		if (stat(argv[i], &st) < 0) {
			perror(argv[i]);
			return 1;
		}
		if (!S_ISDIR(st.st_mode)) {
			if (run_file(argv[i]) < 0)
				return 1;
			ran++;
			continue;
		}
		struct dirent **names;
		int n = scandir(argv[i], &names, NULL, by_name);
		if (n < 0) {
			perror(argv[i]);
			return 1;
		}
		for (int k = 0; k < n; k++) {
			char path[4096];
			if (names[k]->d_name[0] != '.') {
				snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);
				if (run_file(path) < 0)
					return 1;
				ran++;
			}
			free(names[k]);
		}
		free(names);
	}
	if (!ran) {
		fprintf(stderr, "no corpus input found\n");
		return 1;
	}
	printf("%u inputs replayed\n", ran);
	return 0;
}

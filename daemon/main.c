/* SPDX-License-Identifier: MIT */
/* gpusysd: command line and configuration; daemon.c does the rest. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <sysexits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h" /* generated: GPUSYS_VERSION, GPUSYS_DEFAULT_CONFIG */
#include "core/service.h"
#include "services.h"
#include "util/config_file.h"
#include "daemon.h"
#include "reload.h"
#include "common/wire.h"
#include "util/log.h"
#include "util/notify.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: gpusysd [OPTION]...\n"
		"Serve system calls from GPU kernels (and host-lane emulators) of attached clients.\n"
		"\n"
		"  --runtime-dir DIR  sockets and lock live here (default $" GPUSYS_RUNTIME_DIR_ENV
		" or " GPUSYS_DEFAULT_RUNTIME_DIR ")\n"
		"  --config FILE      settings file (default " GPUSYS_DEFAULT_CONFIG ", if present)\n"
		"  --pollers N        poller threads (overrides the file; 0: from the CPU count)\n"
		"  --workers M        worker threads for blocking requests (overrides the file)\n"
		"  --foreground       stay in the foreground (the only mode; for unit files)\n"
		"  --verbose          log debug messages too\n"
		"  --check-config [FILE]  read the settings (FILE, --config or the default) as a\n"
		"                     start would, say what is wrong (FILE:LINE: why) and exit:\n"
		"                     0 valid, 78 (EX_CONFIG) not\n"
		"  --version          print the version and exit\n"
		"  --help             print this and exit\n"
		"\n"
		"Exit status: 0 stopped cleanly (or the settings are valid); 1 cannot start (a\n"
		"setting, a socket, another gpusysd); 2 bad usage; 78 invalid settings\n"
		"(--check-config).\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "runtime-dir", required_argument, NULL, 'r' },
		{ "config", required_argument, NULL, 'c' },
		{ "pollers", required_argument, NULL, 'p' },
		{ "workers", required_argument, NULL, 'w' },
		{ "foreground", no_argument, NULL, 'f' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "version", no_argument, NULL, 'V' },
		{ "check-config", no_argument, NULL, 'C' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	const char *runtime_dir = NULL, *config_path = NULL, *pollers = NULL, *workers = NULL;
	bool check_config = false;
	struct gpusysd_config cfg;
	char err[512];
	int c;

	log_init();
	/* Until the event loop takes it over, a SIGHUP must not end us (it
	 * means "reload", not "hang up"), nor be lost: it is held blocked
	 * (pending, never discarded: Linux keeps a blocked signal even while
	 * its action is to ignore it) and daemon_start unblocks it once its
	 * handler is in place, so `systemctl reload` right after a start
	 * reloads. Ignored too, for the paths that exit before that. */
	sigset_t hup;
	sigemptyset(&hup);
	sigaddset(&hup, SIGHUP);
	sigprocmask(SIG_BLOCK, &hup, NULL);
	signal(SIGHUP, SIG_IGN);
	/* From here on every exit path tells systemd we are stopping. */
	notify_init();

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r': runtime_dir = optarg; break;
		case 'c': config_path = optarg; break;
		case 'p': pollers = optarg; break;
		case 'w': workers = optarg; break;
		case 'f': break;
		case 'v': log_set_level(LOG_DEBUG); break;
		case 'V': printf("gpusysd %s\n", GPUSYS_VERSION); return 0;
		case 'C': check_config = true; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2; /* bad usage, as gpusysctl */
		}
	}
	/* --check-config [FILE] */
	if (check_config && optind < argc && !config_path)
		config_path = argv[optind++];
	if (optind < argc) {
		fprintf(stderr, "gpusysd: unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}

	services_use(gpusysd_services);
	/* The default file is optional; one named on the command line is not.
	 * Then the environment (GPUSYSD_<KEY>), then the command line. */
	int r = daemon_read_config(&cfg, config_path, err, sizeof(err));
	if (check_config) {
		/* The same reading as start-up and SIGHUP (reload.h); what
		 * only binding tells (a port in use) start-up reports, as
		 * the daemon being checked may hold that port itself. */
		if (r < 0) {
			fprintf(stderr, "gpusysd: %s\n", err);
			return EX_CONFIG;
		}
		/* No default file: the daemon runs on its defaults, and
		 * saying "valid" of a file that is not there would lie. */
		if (!cfg.source[0])
			printf("%s: not found (defaults apply)\n", GPUSYS_DEFAULT_CONFIG);
		else
			printf("%s: valid\n", cfg.source);
		return 0;
	}
	if (r < 0) {
		log_err("%s", err);
		return 1;
	}
	struct gpusysd_config as_read = cfg;
	if (pollers && config_set(&cfg, "pollers", pollers, err, sizeof(err)) < 0) {
		log_err("--pollers: %s", err);
		return 1;
	}
	if (workers && config_set(&cfg, "workers", workers, err, sizeof(err)) < 0) {
		log_err("--workers: %s", err);
		return 1;
	}
	if (!runtime_dir)
		runtime_dir = getenv(GPUSYS_RUNTIME_DIR_ENV);
	if (!runtime_dir || !*runtime_dir)
		runtime_dir = GPUSYS_DEFAULT_RUNTIME_DIR;

	return daemon_run(&cfg, &as_read, config_path, runtime_dir);
}

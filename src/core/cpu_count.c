/* cpu_count.c - the number of CPUs this process may run on (cpu_count.h says why). */
#include "core/cpu_count.h"

#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A small file's text into buf (NUL-terminated); false when it cannot be read. */
static bool read_small(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n > 0;
}

/* CPUs the quota allows, rounded up (a quota of 1.5 CPUs keeps 2 threads busy part of the
 * time); 0 when there is no quota or the text does not parse. */
static int quota_cpus(long long quota, long long period) {
    if (quota <= 0 || period <= 0) return 0;
    long long n = (quota + period - 1) / period;
    return n > 4096 ? 4096 : (int)n;
}

int kiln_usable_cpus_from(int affinity, long online, const char *cpu_max_v2, const char *quota_v1,
                          const char *period_v1) {
    int n = affinity > 0 ? affinity : (online > 0 && online < 4096 ? (int)online : 1);
    int q = 0;
    if (cpu_max_v2) {
        /* "max 100000" (no limit) or "200000 100000" (quota, period in microseconds) */
        long long quota = 0, period = 0;
        if (strncmp(cpu_max_v2, "max", 3) != 0 && sscanf(cpu_max_v2, "%lld %lld", &quota, &period) == 2)
            q = quota_cpus(quota, period);
    } else if (quota_v1 && period_v1) {
        /* v1: cpu.cfs_quota_us is -1 when unlimited */
        q = quota_cpus(strtoll(quota_v1, NULL, 10), strtoll(period_v1, NULL, 10));
    }
    if (q > 0 && q < n) n = q;
    return n > 0 ? n : 1;
}

/* The cgroup v2 path of this process ("0::/some/path" in /proc/self/cgroup) into buf. */
static bool cgroup_v2_path(char *buf, size_t cap) {
    char text[4096];
    if (!read_small("/proc/self/cgroup", text, sizeof text)) return false;
    char *save = NULL; /* strtok_r: pools may be created from several threads at once */
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (strncmp(line, "0::", 3) == 0) {
            snprintf(buf, cap, "%s", line + 3);
            return true;
        }
    return false;
}

int kiln_usable_cpus(void) {
    int affinity = 0;
#ifdef CPU_COUNT
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) affinity = CPU_COUNT(&set);
#endif
    char v2[128], q1[64], p1[64], path[4096], file[4200];
    const char *cpu_max = NULL, *quota = NULL, *period = NULL;
    /* the process's own cgroup first; inside a container the namespace root is its own */
    if (cgroup_v2_path(path, sizeof path)) {
        snprintf(file, sizeof file, "/sys/fs/cgroup%s/cpu.max", strcmp(path, "/") == 0 ? "" : path);
        if (read_small(file, v2, sizeof v2)) cpu_max = v2;
    }
    if (!cpu_max && read_small("/sys/fs/cgroup/cpu.max", v2, sizeof v2)) cpu_max = v2;
    if (!cpu_max && read_small("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", q1, sizeof q1) &&
        read_small("/sys/fs/cgroup/cpu/cpu.cfs_period_us", p1, sizeof p1)) {
        quota = q1;
        period = p1;
    }
    return kiln_usable_cpus_from(affinity, sysconf(_SC_NPROCESSORS_ONLN), cpu_max, quota, period);
}

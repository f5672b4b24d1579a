/* cpu_count.h - how many CPUs this process may actually run on.
 *
 * sysconf(_SC_NPROCESSORS_ONLN) counts the machine's CPUs, not the ones the process is
 * allowed to use. Under `taskset`, a cpuset (Kubernetes, `docker --cpuset-cpus`) or a CPU
 * quota (`docker --cpus`, cgroup cpu.max), a thread count taken from it oversubscribes
 * the CPUs: kiln's pool workers spin between parallel loops, so two of them sharing a
 * CPU halve the speed of every layer (measured on the GPU host's Xeon, pinned to two
 * CPUs: a 1x1 conv at 2 threads took 1.6-1.9 ms against 0.77 ms at 1 thread, its caller
 * sharing a CPU with a spinning worker; docs/BENCHMARKS.md, "Session 8").
 *
 * Every default thread count in kiln (the CPU thread pool, `kiln exec`, the timing-cache
 * key, engine checksums) comes from here, so they agree with each other.
 */
#ifndef KILN_CORE_CPU_COUNT_H
#define KILN_CORE_CPU_COUNT_H

/* The CPUs in this thread's affinity mask, capped by the cgroup's CPU quota (v2 cpu.max,
 * or v1 cpu.cfs_quota_us / cpu.cfs_period_us, rounded up) when one is set; at least 1.
 * Falls back to the online CPU count when the mask cannot be read. */
int kiln_usable_cpus(void);

/* The same from explicit inputs (for tests): `affinity` CPUs in the mask (<= 0: unknown,
 * use `online`), and the cgroup files' text (NULL: absent). */
int kiln_usable_cpus_from(int affinity, long online, const char *cpu_max_v2, const char *quota_v1,
                          const char *period_v1);

#endif

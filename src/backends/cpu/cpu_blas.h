/* cpu_blas.h - the one place kiln talks to the BLAS library about threads.
 *
 * kiln's own thread pool and OpenBLAS's threads must not both run N threads on N cores
 * (oversubscription makes GEMM-heavy models several times slower). The thread pool calls
 * cpu_blas_set_threads() with its own size when it is created, so a session with
 * --threads 4 also runs GEMMs on 4 threads. A no-op when kiln was built without OpenBLAS.
 */
#ifndef KILN_BACKENDS_CPU_CPU_BLAS_H
#define KILN_BACKENDS_CPU_CPU_BLAS_H

void cpu_blas_set_threads(int n_threads);
/* Threads OpenBLAS currently uses (1 without OpenBLAS). */
int cpu_blas_get_threads(void);

#endif

/* reftrain's compute step, real CPU attention (the emulated GPU is
 * ../emu/emu.h). */
#ifndef REFTRAIN_COMPUTE_H
#define REFTRAIN_COMPUTE_H

#include <stdint.h>

/* Real single-head causal attention over each sample plus a d x d linear
 * map per token; Q, K, V derived from token ids. Returns a checksum so the
 * work cannot be optimised away. */
typedef struct cpu_work cpu_work_t;
cpu_work_t *cpu_work_new(int32_t dim);
double cpu_pack(cpu_work_t *w, const int32_t *cu_seqlens, int32_t nsamples,
                const int32_t *tokens);
void cpu_work_free(cpu_work_t *w);

#endif

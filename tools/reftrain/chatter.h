/* reftrain --chatter MS: a coordinator thread, as Horovod's background
 * loop, that every MS milliseconds does a small MPI_Allreduce on its own
 * duplicate of MPI_COMM_WORLD, concurrently with the trainer's own MPI
 * calls. It is no gradient sync, and a balancer must not take it for one.
 * Needs MPI_THREAD_MULTIPLE. */
#ifndef REFTRAIN_CHATTER_H
#define REFTRAIN_CHATTER_H

#include <stdint.h>

typedef struct rt_chatter rt_chatter_t;

/* Collective over MPI_COMM_WORLD (it duplicates it), from the thread that
 * called MPI_Init_thread. NULL when out of memory or the thread cannot
 * start (with a line on stderr); the caller aborts then, since the other
 * ranks' threads would wait for this one's rounds. */
rt_chatter_t *rt_chatter_start(int32_t ms);

/* Asks this rank's thread to stop and joins it. The threads stop together
 * in the first round in which every rank has asked, so this returns once
 * the slowest rank has called it too (at most MS later); then frees the
 * duplicate (collective). Returns the rounds made. NULL is accepted. */
int64_t rt_chatter_stop(rt_chatter_t *c);

#endif

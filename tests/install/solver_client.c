/* A solver client built against the installed tree with pkg-config only:
 * four ranks, one holding most of the work; it must get a plan that lowers
 * the maximum load. Prints "applied MAX_BEFORE MAX_AFTER". */
#include <dpshim/solver.h>
#include <stdio.h>

int main(void) {
  dpshim_sample_t s[12];
  int n = 0;
  for (int k = 0; k < 12; k++)
    s[n++] = (dpshim_sample_t){k < 8 ? 900 : 100, 4 * 900, k < 8 ? 0 : k - 8,
                               0, 0, 0};
  dpshim_plan_input_t in = {.ranks = 4, .samples = s, .nsamples = n,
                            .model = {1, 8000, 0, 0, 0},
                            .algo = DPSHIM_ALGO_DEFAULT};
  dpshim_plan_t plan;
  dpshim_plan_init(&plan);
  int rc = dpshim_plan_solve(&in, &plan);
  if (rc != 0) {
    fprintf(stderr, "solve: %s\n", plan.message);
    return 1;
  }
  double before = 0, after = 0;
  for (int r = 0; r < 4; r++) {
    before = plan.load_before[r] > before ? plan.load_before[r] : before;
    after = plan.load_after[r] > after ? plan.load_after[r] : after;
  }
  int applied = plan.decision == DPSHIM_DECISION_APPLY;
  printf("%s %.0f %.0f\n", applied ? "applied" : "skipped", before, after);
  dpshim_plan_free(&plan);
  return applied && after < before ? 0 : 1;
}

/* tests/test_log.c - the log hook (amp_set_log) under concurrent logging: every message reaches one
   hook with that hook's own user pointer, a hook may set the hook, and the default comes back on
   NULL. tests/run.sh also builds this file with ThreadSanitizer (the line below) and fails on any
   report. */
// TSAN: yes
#define AMP_IMPLEMENTATION
#include "amp.h"
#include "test.h"
#include <pthread.h>
#include <sched.h>
#include <string.h>

typedef struct { int id; long calls; long wrong; } hook_user;   /* calls/wrong: atomic counters */
static hook_user ua = {1, 0, 0}, ub = {2, 0, 0};

static void hook_a(void *user, const char *msg) {
  hook_user *u = (hook_user *)user;
  __atomic_add_fetch(&ua.calls, 1, __ATOMIC_RELAXED);
  if (u != &ua || strncmp(msg, "message ", 8) != 0) __atomic_add_fetch(&ua.wrong, 1, __ATOMIC_RELAXED);
}
static void hook_b(void *user, const char *msg) {
  hook_user *u = (hook_user *)user;
  __atomic_add_fetch(&ub.calls, 1, __ATOMIC_RELAXED);
  if (u != &ub || strncmp(msg, "message ", 8) != 0) __atomic_add_fetch(&ub.wrong, 1, __ATOMIC_RELAXED);
}

#define LOGGERS 2
static int switches(void) { return t_quick() ? 500 : 5000; }
static int stop_logging, loggers_started;
static long logged;

/* Logs until the switcher is done (at least 100 messages). */
static void *logger(void *arg) {
  long i;
  for (i = 0; i < 100 || !__atomic_load_n(&stop_logging, __ATOMIC_ACQUIRE); i++) {
    amp__log("message %ld from %d", i, *(int *)arg);
    if (i == 0) __atomic_add_fetch(&loggers_started, 1, __ATOMIC_RELAXED);
  }
  __atomic_add_fetch(&logged, i, __ATOMIC_RELAXED);
  return NULL;
}
/* Switches the hook while every logger runs (it waits for them to start, so the calls overlap). */
static void *switcher(void *arg) {
  int i;
  (void)arg;
  while (__atomic_load_n(&loggers_started, __ATOMIC_RELAXED) < LOGGERS) sched_yield();
  for (i = 0; i < switches(); i++) {   /* each hook kept until a message reached it */
    hook_user *u = i & 1 ? &ub : &ua;
    long seen = __atomic_load_n(&u->calls, __ATOMIC_RELAXED);
    amp_set_log(i & 1 ? hook_b : hook_a, u);
    while (__atomic_load_n(&u->calls, __ATOMIC_RELAXED) == seen) sched_yield();
  }
  __atomic_store_n(&stop_logging, 1, __ATOMIC_RELEASE);
  return NULL;
}

static void concurrent_logging_while_the_hook_changes(void) {
  pthread_t t[LOGGERS], sw;
  int ids[LOGGERS], i;
  long total;
  amp_set_log(hook_a, &ua);
  for (i = 0; i < LOGGERS; i++) { ids[i] = i; pthread_create(&t[i], NULL, logger, &ids[i]); }
  pthread_create(&sw, NULL, switcher, NULL);
  pthread_join(sw, NULL);
  for (i = 0; i < LOGGERS; i++) pthread_join(t[i], NULL);
  total = ua.calls + ub.calls;
  EXPECT(total == logged, "messages delivered: expected %ld, got %ld (a %ld, b %ld)", logged, total, ua.calls, ub.calls);
  EXPECT(ua.wrong == 0 && ub.wrong == 0, "messages with another hook's user pointer: a %ld, b %ld", ua.wrong, ub.wrong);
  EXPECT(ua.calls > 0 && ub.calls > 0, "both hooks were used (a %ld, b %ld)", ua.calls, ub.calls);
}

/* A hook that replaces itself while it runs (the lock is not held during the call). */
static int reentrant_calls;
static void hook_reentrant(void *user, const char *msg) {
  (void)user; (void)msg;
  reentrant_calls++;
  amp_set_log(hook_a, &ua);
}
static void a_hook_may_set_the_hook(void) {
  long before = ua.calls;
  amp_set_log(hook_reentrant, NULL);
  amp__log("message %d", 1);
  amp__log("message %d", 2);
  EXPECT(reentrant_calls == 1 && ua.calls == before + 1, "reentrant hook %d calls, then hook_a %ld", reentrant_calls, ua.calls - before);
  amp_set_log(NULL, &ub);   /* NULL restores the default (and drops the user pointer) */
  EXPECT(amp__log_fn == amp__log_default && amp__log_user == NULL, "amp_set_log(NULL) did not restore the default");
}

/* The public path that logs: each thread its own scaler stuck at its floor. */
static void *floor_logger(void *arg) {
  amp_scaler_config c;
  amp_scaler *s;
  int i;
  (void)arg;
  memset(&c, 0, sizeof c); c.init_scale = 1.0f; c.min_scale = 1.0f;
  if (amp_scaler_create(&s, amp_cpu(), &c) != AMP_OK) return NULL;
  for (i = 0; i < 50; i++) { amp_scaler_update_found_inf(s, 1); amp_scaler_update_found_inf(s, 0); }
  amp_scaler_destroy(s);
  return NULL;
}
static int floor_messages;
static void hook_count(void *user, const char *msg) { (void)user; if (strstr(msg, "floor")) __atomic_add_fetch(&floor_messages, 1, __ATOMIC_RELAXED); }
static void scalers_at_their_floor_log_from_several_threads(void) {
  pthread_t t[LOGGERS];
  int i;
  amp_set_log(hook_count, NULL);
  for (i = 0; i < LOGGERS; i++) pthread_create(&t[i], NULL, floor_logger, NULL);
  for (i = 0; i < 20; i++) amp_set_log(hook_count, &floor_messages);
  for (i = 0; i < LOGGERS; i++) pthread_join(t[i], NULL);
  EXPECT(floor_messages >= LOGGERS, "floor messages: %d from %d threads", floor_messages, LOGGERS);
  amp_set_log(NULL, NULL);
}

int main(void) {
  RUN(concurrent_logging_while_the_hook_changes);
  RUN(a_hook_may_set_the_hook);
  RUN(scalers_at_their_floor_log_from_several_threads);
  TEST_END();
}

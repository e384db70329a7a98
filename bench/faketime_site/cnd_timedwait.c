/* Preloaded before libfaketime in a soak worker whose wall clock may jump (bench/soak_machine.py).

libfaketime 0.9.10 fakes every clock read (clock_gettime, gettimeofday, timespec_get) and converts
the deadline of pthread_cond_timedwait from faked to real time, but does not interpose C11's
cnd_timedwait, which librdkafka (confluent-kafka's wheel) waits with: its deadline is computed on
the faked clock and then waited for on the real one, so with the clock an hour ahead every timed
wait lasts an hour longer. No real clock does that: a clock that is an hour ahead (or stepped
there, as NTP steps it) agrees with itself. This cnd_timedwait is glibc's own (a cnd_t is a
pthread_cond_t, an mtx_t a pthread_mutex_t) waiting through pthread_cond_timedwait, so that
libfaketime converts its deadline like every other one. */
#include <errno.h>
#include <pthread.h>
#include <threads.h>

int cnd_timedwait(cnd_t *restrict cond, mtx_t *restrict mutex,
                  const struct timespec *restrict deadline)
{
    int err = pthread_cond_timedwait((pthread_cond_t *)cond, (pthread_mutex_t *)mutex, deadline);
    return err == 0 ? thrd_success : err == ETIMEDOUT ? thrd_timedout : thrd_error;
}

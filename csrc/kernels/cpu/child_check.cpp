#include "kernels/cpu/child_check.hpp"

#include <cerrno>
#include <csignal>
#include <cstring>

#if defined(__linux__)
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#endif

namespace dsperf::kernels {

std::string fails_in_child(bool (*check)(), double timeout_s) {
#if defined(__linux__)
    // _Fork runs no atfork handlers: OpenBLAS's would stop its threads, and the child runs no
    // library code that needs them.
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    const pid_t pid = _Fork();
#else
    const pid_t pid = fork();
#endif
    if (pid < 0) return std::string("the child process could not start (") + std::strerror(errno) + ")";
    if (pid == 0) {
        prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
        _exit(check() ? 0 : 1);
    }
    // Poll rather than block, so that a child that hangs is killed instead of hanging the caller.
    const long step_ns = 1000000;  // 1 ms
    const long max_steps = static_cast<long>(timeout_s * 1e3) + 1;
    int status = 0;
    for (long i = 0;; ++i) {
        const pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid) break;
        if (got < 0 && errno != EINTR) return std::string("the child process was lost (") + std::strerror(errno) + ")";
        if (i >= max_steps) {
            kill(pid, SIGKILL);
            while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
            }
            return "the child process did not finish within " + std::to_string(static_cast<int>(timeout_s)) + " s";
        }
        const timespec ts{0, step_ns};
        nanosleep(&ts, nullptr);
    }
    if (WIFSIGNALED(status)) return std::string("it stopped the child with signal ") + std::to_string(WTERMSIG(status));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return "";
    return "it ran but gave a wrong result";
#else
    (void)check, (void)timeout_s;
    return "the check needs Linux";
#endif
}

}  // namespace dsperf::kernels

/*
 * pause: the process that holds a pod sandbox's namespaces.
 *
 * It does nothing but wait: it sleeps until SIGTERM or SIGINT asks it to
 * leave, and it reaps any child that gets re-parented to it (it is PID 1 of
 * the pod's PID namespace when the pod shares one). Built statically so that
 * an image made of this one file runs anywhere.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static void leave(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "-v") == 0) {
        printf("pause (kubelet-rs)\n");
        return 0;
    }
    if (getpid() != 1) {
        fprintf(stderr, "pause: warning: not running as PID 1\n");
    }

    struct sigaction term = {0};
    term.sa_handler = leave;
    if (sigaction(SIGINT, &term, NULL) < 0 || sigaction(SIGTERM, &term, NULL) < 0) {
        perror("pause: sigaction");
        return 1;
    }
    struct sigaction chld = {0};
    chld.sa_handler = reap;
    chld.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &chld, NULL) < 0) {
        perror("pause: sigaction");
        return 2;
    }

    for (;;) {
        pause();
    }
    return 42; /* not reached */
}

/* corral-enter CGROUP PROGRAM [ARG...]: what `sh -c 'echo 0 > "$0/cgroup.procs" && exec "$@"' CGROUP PROGRAM ARG...`
 * does with Debian's shell (dash), without a shell: move this process into the cgroup v2 directory CGROUP, then exec
 * PROGRAM, looked up on PATH as dash looks it up (its default PATH where none is set, entries with a `%` skipped, a
 * file without `#!` run by /bin/sh, the exit codes 127 and 126 where none runs), with the environment as dash
 * hands it on: names a shell cannot hold dropped, IFS and OPTIND at the shell's defaults, PPID this process's
 * parent, PWD kept where it names the working directory and else the directory's physical path; an OPTIND dash
 * takes for no number (its `number`) ends the start with exit code 2 before the cgroup is entered, as dash does.
 *
 * Built by the worker (corral/worker/entering.py) where a C compiler is found, without the C library: a start
 * pays for no loader and no library start-up, which is most of what the shell cost a task. Only system calls. */

#define AT_FDCWD (-100)
#define O_WRONLY 01
#define O_CLOEXEC 02000000
#define ENOENT 2
#define ENOEXEC 8
#define ENOTDIR 20
#define ENAMETOOLONG 36
#define ELOOP 40
#define PATH_LIMIT 4096

#if defined(__x86_64__)
#define SYS_write 1
#define SYS_close 3
#define SYS_execve 59
#define SYS_exit_group 231
#define SYS_openat 257
#define SYS_newfstatat 262
#define SYS_getcwd 79
#define SYS_getppid 110
static long call(long n, long a, long b, long c, long d) {
    long r;
    register long r10 __asm__("r10") = d;
    __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
    return r;
}
__asm__(".text\n.global _start\n_start:\n xor %rbp, %rbp\n mov %rsp, %rdi\n and $-16, %rsp\n call enter\n hlt\n");
#elif defined(__aarch64__)
#define SYS_write 64
#define SYS_close 57
#define SYS_execve 221
#define SYS_exit_group 94
#define SYS_openat 56
#define SYS_newfstatat 79
#define SYS_getcwd 17
#define SYS_getppid 173
static long call(long n, long a, long b, long c, long d) {
    register long x8 __asm__("x8") = n, x0 __asm__("x0") = a, x1 __asm__("x1") = b, x2 __asm__("x2") = c,
        x3 __asm__("x3") = d;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3) : "memory");
    return x0;
}
__asm__(".text\n.global _start\n_start:\n mov x29, #0\n mov x0, sp\n bl enter\n brk #0\n");
#else
#error "corral-enter is built for x86-64 and aarch64 only; elsewhere the worker enters a cgroup by the shell"
#endif

struct where { unsigned long dev, ino; char rest[128]; };  /* struct stat: st_dev, then st_ino, on both */

static __attribute__((noreturn)) void leave(int code) { for (;;) call(SYS_exit_group, code, 0, 0, 0); }

static unsigned long length(const char *s) { unsigned long n = 0; while (s[n]) n++; return n; }

static void say(const char *what, const char *name, long error) {
    char number[24], *p = number + sizeof number;
    unsigned long e = (unsigned long)-error;
    *--p = 0;
    do { *--p = (char)('0' + e % 10); e /= 10; } while (e);
    const char *parts[] = {"corral-enter: ", what, name, ": errno ", p, "\n"};
    for (int i = 0; i < 6; i++) call(SYS_write, 2, (long)parts[i], (long)length(parts[i]), 0);
}

static int alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static int named(const char *entry, const char *name) {  /* entry is NAME=... */
    while (*name && *entry == *name) entry++, name++;
    return !*name && *entry == '=';
}
static int shell_name(const char *entry) {  /* dash's endofname: [A-Za-z_][A-Za-z0-9_]* then '=' */
    if (!alpha(*entry)) return 0;
    while (alpha(*++entry) || (*entry >= '0' && *entry <= '9')) {}
    return *entry == '=';
}

static int slash(const char *s) { while (*s) if (*s++ == '/') return 1; return 0; }

/* dash's tryexec: a file execve refuses as no program (ENOEXEC) is run by /bin/sh as a script; the error if none ran */
static long run(const char *file, char **args, char **env) {
    long error = call(SYS_execve, (long)file, (long)args, (long)env, 0);
    if (error == -ENOEXEC) {
        const char *program = args[0];
        args[0] = (char *)file;
        args[-1] = "/bin/sh";
        error = call(SYS_execve, (long)"/bin/sh", (long)(args - 1), (long)env, 0);
        args[0] = (char *)program;
    }
    return error;
}

static int space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }
static int digit(char c) { return c >= '0' && c <= '9'; }

/* Whether dash's `number` refuses `s` ("Illegal number"): anything but blanks, a sign, digits, blanks making an
 * integer from 0 to INT_MAX. */
static int illegal_number(const char *s) {
    unsigned long value = 0;
    int negative = 0;
    while (space(*s)) s++;
    if (*s == '+' || *s == '-') negative = *s++ == '-';
    if (!digit(*s)) return 1;
    while (digit(*s)) {
        value = value * 10 + (unsigned long)(*s++ - '0');
        if (value > 2147483647UL) return 1;
    }
    while (space(*s)) s++;
    return *s || (negative && value);
}

__attribute__((used)) void enter(long *stack) {
    long argc = stack[0];
    char **argv = (char **)(stack + 1), **envp = argv + argc + 1;
    if (argc < 3) { say("usage: CGROUP PROGRAM [ARG...]", "", -22); leave(2); }
    for (long i = 0; envp[i]; i++)
        if (named(envp[i], "OPTIND") && illegal_number(envp[i] + 7)) { say("illegal number: ", envp[i], -22); leave(2); }

    char procs[PATH_LIMIT + 16];
    unsigned long n = length(argv[1]);
    if (n > PATH_LIMIT) { say("cannot enter ", argv[1], -36); leave(2); }
    for (unsigned long i = 0; i < n; i++) procs[i] = argv[1][i];
    const char *tail = "/cgroup.procs";
    for (unsigned long i = 0; i <= 13; i++) procs[n + i] = tail[i];
    long fd = call(SYS_openat, AT_FDCWD, (long)procs, O_WRONLY | O_CLOEXEC, 0);
    long written = fd < 0 ? fd : call(SYS_write, fd, (long)"0\n", 2, 0);
    if (written < 0) { say("cannot enter ", argv[1], written); leave(2); }
    call(SYS_close, fd, 0, 0, 0);

    long count = 0;
    while (envp[count]) count++;
    char *env[count + 2];
    char pwd[PATH_LIMIT + 8] = "PWD=", ppid[32] = "PPID=";
    static char ifs[] = "IFS= \t\n", optind[] = "OPTIND=1";
    const char *kept = 0;
    struct where here, there;
    for (long i = 0; i < count; i++)
        if (named(envp[i], "PWD") && envp[i][4] == '/' && call(SYS_newfstatat, AT_FDCWD, (long)".", (long)&here, 0) == 0
            && call(SYS_newfstatat, AT_FDCWD, (long)(envp[i] + 4), (long)&there, 0) == 0
            && here.dev == there.dev && here.ino == there.ino)
            kept = envp[i];
    if (!kept && call(SYS_getcwd, (long)(pwd + 4), PATH_LIMIT, 0, 0) < 0) { say("cannot find the directory", "", -2); leave(2); }
    long m = 0, pwd_seen = 0;
    for (long i = 0; i < count; i++) {
        char *entry = envp[i];
        if (!shell_name(entry)) continue;
        if (named(entry, "PWD")) { entry = kept ? (char *)kept : pwd; pwd_seen = 1; }
        else if (named(entry, "IFS")) entry = ifs;
        else if (named(entry, "OPTIND")) entry = optind;
        else if (named(entry, "PPID")) {
            char digits[24], *p = digits + sizeof digits;
            unsigned long v = (unsigned long)call(SYS_getppid, 0, 0, 0, 0);
            *--p = 0;
            do { *--p = (char)('0' + v % 10); v /= 10; } while (v);
            for (int j = 0; (ppid[5 + j] = p[j]) != 0; j++) {}
            entry = ppid;
        }
        env[m++] = entry;
    }
    if (!pwd_seen) env[m++] = pwd;
    env[m] = 0;

    char **args = argv + 2;
    long error;
    if (slash(args[0])) {
        error = run(args[0], args, env);
    } else {  /* dash's padvance and shellexec */
        const char *path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
        for (long i = 0; env[i]; i++)
            if (named(env[i], "PATH")) path = env[i] + 5;
        char file[PATH_LIMIT + 8];
        unsigned long name = length(args[0]);
        error = -ENOENT;
        for (const char *p = path; p;) {
            const char *end = p;
            while (*end && *end != ':' && *end != '%') end++;
            int option = *end == '%';
            unsigned long size = (unsigned long)(end - p);
            const char *next = end;
            while (*next && *next != ':') next++;
            if (!option && size + name + 2 <= sizeof file) {
                unsigned long k = 0;
                for (; k < size; k++) file[k] = p[k];
                if (size) file[k++] = '/';
                for (unsigned long j = 0; j <= name; j++) file[k + j] = args[0][j];
                long tried = run(file, args, env);
                if (tried != -ENOENT && tried != -ENOTDIR) error = tried;
            }
            p = *next ? next + 1 : 0;
        }
    }
    say("cannot run ", args[0], error);
    /* dash's shellexec: a program not found is 127, one found and not run 126 */
    leave(error == -ENOENT || error == -ENOTDIR || error == -ELOOP || error == -ENAMETOOLONG ? 127 : 126);
}

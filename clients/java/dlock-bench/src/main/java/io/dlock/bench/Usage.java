package io.dlock.bench;

import java.io.IOException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;

/**
 * CPU time and context switches of a process, read from Linux's /proc (zeros elsewhere):
 * what a contended run costs the client and the server per grant, which explains the
 * grants/s better than the grants/s alone on a small machine.
 */
record Usage(long cpuNanos, long switches) {
    private static final long TICK_NANOS = 10_000_000L; // USER_HZ is 100 on Linux

    static Usage of(long pid) {
        Path proc = Path.of("/proc", Long.toString(pid));
        long cpu = 0;
        long switches = 0;
        try {
            String stat = Files.readString(proc.resolve("stat"));
            // Fields after the command name (which may hold spaces) start after the last ')'.
            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
            cpu = (Long.parseLong(f[11]) + Long.parseLong(f[12])) * TICK_NANOS;
            try (DirectoryStream<Path> tasks = Files.newDirectoryStream(proc.resolve("task"))) {
                for (Path t : tasks) {
                    switches += switchesOf(t);
                }
            }
        } catch (IOException | RuntimeException e) {
            return new Usage(0, 0);
        }
        return new Usage(cpu, switches);
    }

    private static long switchesOf(Path task) {
        try {
            long n = 0;
            for (String line : Files.readAllLines(task.resolve("status"))) {
                if (line.startsWith("voluntary_ctxt_switches:") || line.startsWith("nonvoluntary_ctxt_switches:")) {
                    n += Long.parseLong(line.substring(line.indexOf(':') + 1).trim());
                }
            }
            return n;
        } catch (IOException | RuntimeException e) {
            return 0; // the thread ended meanwhile
        }
    }

    Usage minus(Usage o) {
        return new Usage(cpuNanos - o.cpuNanos, switches - o.switches);
    }

    Usage plus(Usage o) {
        return new Usage(cpuNanos + o.cpuNanos, switches + o.switches);
    }
}

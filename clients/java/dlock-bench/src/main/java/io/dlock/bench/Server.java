package io.dlock.bench;

import java.io.BufferedInputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

/**
 * A redis-server with the dlock module on a free loopback port (REDIS_SERVER, DLOCK_MODULE),
 * stopped by PID on close and by a shutdown hook; plus the raw INFO it is asked for.
 */
final class Server implements AutoCloseable {
    private final Process process;
    private final Path dir;
    private final Thread hook;
    final int port;
    final String binary;
    final String module;

    private Server(Process process, Path dir, int port, String binary, String module) {
        this.process = process;
        this.dir = dir;
        this.port = port;
        this.binary = binary;
        this.module = module;
        this.hook = new Thread(process::destroyForcibly, "stop-bench-server");
        Runtime.getRuntime().addShutdownHook(hook);
    }

    /** The server's process id. */
    long pid() {
        return process.pid();
    }

    static String env(String name, String fallback) {
        String v = System.getenv(name);
        return v == null || v.isEmpty() ? fallback : v;
    }

    static Server start() throws IOException, InterruptedException {
        String binary = env("REDIS_SERVER", "redis-server");
        String module = env("DLOCK_MODULE", null);
        if (module == null) {
            File f = new File("../../../target/release/libdlock.so").getAbsoluteFile();
            if (!f.exists()) {
                f = new File("../../target/release/libdlock.so").getAbsoluteFile();
            }
            module = f.getPath();
        }
        if (!new File(module).isFile()) {
            throw new IOException("no dlock module at " + module + ": build it (cargo build --release) or set"
                    + " DLOCK_MODULE to the path of libdlock.so");
        }
        int port;
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = ss.getLocalPort();
        }
        Path dir = Files.createTempDirectory("dlock-bench");
        Process p = new ProcessBuilder(List.of(binary, "--port", Integer.toString(port), "--bind", "127.0.0.1",
                "--save", "", "--appendonly", "no", "--dir", dir.toString(), "--loadmodule", module))
                .redirectErrorStream(true).redirectOutput(dir.resolve("server.log").toFile()).start();
        Server s = new Server(p, dir, port, binary, module);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (true) {
            if (!p.isAlive()) {
                String log = Files.readString(dir.resolve("server.log"));
                s.close();
                throw new IOException(binary + " exited with " + p.exitValue() + ": " + log);
            }
            try {
                if (s.command("PING").startsWith("PONG")) {
                    return s;
                }
            } catch (IOException e) {
                // not listening yet
            }
            if (System.nanoTime() > deadline) {
                s.close();
                throw new IOException(binary + " did not answer PING on port " + port + " within 20 s");
            }
            Thread.sleep(20);
        }
    }

    /** One inline command on a new connection; the reply's text (bulk strings whole). */
    String command(String inline) throws IOException {
        try (Socket sock = new Socket()) {
            sock.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 2000);
            sock.setSoTimeout(10_000);
            OutputStream out = sock.getOutputStream();
            out.write((inline + "\r\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
            InputStream in = new BufferedInputStream(sock.getInputStream());
            String first = line(in);
            if (first.startsWith("$")) {
                int n = Integer.parseInt(first.substring(1));
                if (n < 0) {
                    return "";
                }
                byte[] buf = in.readNBytes(n);
                return new String(buf, StandardCharsets.UTF_8);
            }
            if (first.startsWith("-")) {
                throw new IOException(inline + ": " + first);
            }
            return first.substring(1);
        }
    }

    private static String line(InputStream in) throws IOException {
        StringBuilder sb = new StringBuilder();
        int c;
        while ((c = in.read()) != -1) {
            if (c == '\r') {
                in.read();
                break;
            }
            sb.append((char) c);
        }
        return sb.toString();
    }

    /** {@code INFO commandstats} as command name → calls. */
    Map<String, Long> commandCalls() throws IOException {
        Map<String, Long> out = new TreeMap<>();
        for (String l : command("INFO commandstats").split("\r?\n")) {
            if (!l.startsWith("cmdstat_")) {
                continue;
            }
            int colon = l.indexOf(':');
            String name = l.substring("cmdstat_".length(), colon);
            for (String kv : l.substring(colon + 1).split(",")) {
                if (kv.startsWith("calls=")) {
                    out.put(name, Long.parseLong(kv.substring(6)));
                }
            }
        }
        return out;
    }

    String version() {
        try {
            for (String l : command("INFO server").split("\r?\n")) {
                if (l.startsWith("redis_version:") || l.startsWith("valkey_version:")) {
                    return l.replace(':', ' ');
                }
            }
        } catch (IOException e) {
            return "unknown version (" + e.getMessage() + ")";
        }
        return "unknown version";
    }

    @Override
    public void close() {
        process.destroy();
        try {
            if (!process.waitFor(5, TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(5, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException e) {
            // shutting down
        }
        try (var files = Files.walk(dir)) {
            files.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
        } catch (IOException e) {
            // best effort
        }
    }
}

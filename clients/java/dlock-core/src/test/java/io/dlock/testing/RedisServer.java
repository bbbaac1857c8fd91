package io.dlock.testing;

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
import java.util.ArrayList;
import java.util.List;

/**
 * A redis-server / valkey-server with the dlock module, on a free loopback port, started
 * for a test and stopped by PID (also by a shutdown hook if the JVM ends first).
 *
 * <p>Environment: {@code DLOCK_MODULE} (path of libdlock.so; default: the workspace's
 * target/release build), {@code REDIS_SERVER} (server binary, default {@code redis-server}),
 * {@code VALKEY_SERVER} (a second server binary to run the same tests on, optional).
 */
public final class RedisServer implements AutoCloseable {
    private final Process process;
    private final int port;
    private final Path dir;
    private final String binary;
    private final Thread hook;

    private RedisServer(Process process, int port, Path dir, String binary) {
        this.process = process;
        this.port = port;
        this.dir = dir;
        this.binary = binary;
        this.hook = new Thread(process::destroyForcibly, "stop-redis-" + process.pid());
        Runtime.getRuntime().addShutdownHook(hook);
    }

    /** The module path from {@code DLOCK_MODULE}, or the workspace's release build. */
    public static String module() {
        String m = System.getenv("DLOCK_MODULE");
        if (m != null && !m.isEmpty()) {
            return m;
        }
        File f = new File("../../../target/release/libdlock.so").getAbsoluteFile();
        if (!f.exists()) {
            f = new File("../../target/release/libdlock.so").getAbsoluteFile();
        }
        return f.getPath();
    }

    /** {@code REDIS_SERVER}, else {@code redis-server}. */
    public static String redisBinary() {
        String s = System.getenv("REDIS_SERVER");
        return s == null || s.isEmpty() ? "redis-server" : s;
    }

    /** {@code VALKEY_SERVER}, or null when unset. */
    public static String valkeyBinary() {
        String s = System.getenv("VALKEY_SERVER");
        return s == null || s.isEmpty() ? null : s;
    }

    /** Starts {@code binary} with the dlock module and {@code extra} arguments. */
    public static RedisServer start(String binary, String... extra) throws IOException, InterruptedException {
        return launch(binary, true, extra);
    }

    /** Starts {@code binary} without the dlock module (for what a client does when it is missing). */
    public static RedisServer startWithoutModule(String binary) throws IOException, InterruptedException {
        return launch(binary, false);
    }

    private static RedisServer launch(String binary, boolean withModule, String... extra)
            throws IOException, InterruptedException {
        IOException last = null;
        for (int attempt = 0; attempt < 5; attempt++) {
            int port = freePort();
            Path dir = Files.createTempDirectory("dlock-java-test");
            List<String> cmd = new ArrayList<>(List.of(binary, "--port", Integer.toString(port), "--bind", "127.0.0.1",
                    "--save", "", "--appendonly", "no", "--dir", dir.toString()));
            if (withModule) {
                cmd.addAll(List.of("--loadmodule", module()));
            }
            cmd.addAll(List.of(extra));
            Process p = new ProcessBuilder(cmd).redirectErrorStream(true)
                    .redirectOutput(dir.resolve("server.log").toFile()).start();
            RedisServer s = new RedisServer(p, port, dir, binary);
            try {
                s.awaitReady();
                return s;
            } catch (IOException e) {
                s.close();
                last = e;
            }
        }
        throw last;
    }

    /**
     * Starts {@code binary} as a one-node Redis Cluster (cluster mode, every slot on this
     * node) with the dlock module, and waits for {@code cluster_state:ok}.
     */
    public static RedisServer startCluster(String binary) throws IOException, InterruptedException {
        RedisServer s = start(binary, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf");
        try {
            String r = s.command("CLUSTER ADDSLOTSRANGE 0 16383");
            if (!r.startsWith("+OK")) {
                throw new IOException("CLUSTER ADDSLOTSRANGE answered " + r);
            }
            long deadline = System.nanoTime() + 20_000_000_000L;
            while (!s.command("CLUSTER INFO").contains("cluster_state:ok")) {
                if (System.nanoTime() > deadline) {
                    throw new IOException("the one-node cluster did not reach cluster_state:ok: " + s.log());
                }
                Thread.sleep(20);
            }
            return s;
        } catch (IOException | InterruptedException | RuntimeException e) {
            s.close();
            throw e;
        }
    }

    private static int freePort() throws IOException {
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            ss.setReuseAddress(true);
            return ss.getLocalPort();
        }
    }

    private void awaitReady() throws IOException, InterruptedException {
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (System.nanoTime() < deadline) {
            if (!process.isAlive()) {
                throw new IOException(binary + " exited with " + process.exitValue() + ": " + log());
            }
            try {
                if (command("PING").startsWith("+PONG")) {
                    return;
                }
            } catch (IOException e) {
                // not listening yet
            }
            Thread.sleep(20);
        }
        throw new IOException(binary + " did not answer PING on port " + port + " within 20 s: " + log());
    }

    /** The server's log so far. */
    public String log() {
        try {
            return Files.readString(dir.resolve("server.log"));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    /** Sends one inline command on a new connection and returns the raw first reply line(s). */
    public String command(String inline) throws IOException {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(InetAddress.getLoopbackAddress(), port), 1000);
            s.setSoTimeout(5000);
            OutputStream out = s.getOutputStream();
            out.write((inline + "\r\n").getBytes(StandardCharsets.UTF_8));
            out.flush();
            InputStream in = s.getInputStream();
            byte[] buf = new byte[65536];
            int n = in.read(buf);
            return n <= 0 ? "" : new String(buf, 0, n, StandardCharsets.UTF_8);
        }
    }

    /** Whether the loaded module has {@code DLOCK.CANCEL}. */
    public boolean hasCancel() throws IOException {
        return !command("COMMAND INFO DLOCK.CANCEL").startsWith("*1\r\n*-1") && !command("COMMAND INFO DLOCK.CANCEL")
                .startsWith("*1\r\n$-1");
    }

    /** The loopback address. */
    public String host() {
        return "127.0.0.1";
    }

    /** The port. */
    public int port() {
        return port;
    }

    /** The server binary. */
    public String binary() {
        return binary;
    }

    /** The server's PID. */
    public long pid() {
        return process.pid();
    }

    /** Stops the server by PID and removes its directory. */
    @Override
    public void close() {
        process.destroy();
        try {
            if (!process.waitFor(5, java.util.concurrent.TimeUnit.SECONDS)) {
                process.destroyForcibly().waitFor(5, java.util.concurrent.TimeUnit.SECONDS);
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
            files.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (IOException e) {
            // best effort
        }
    }
}

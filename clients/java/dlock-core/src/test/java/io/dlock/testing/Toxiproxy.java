package io.dlock.testing;

import java.io.File;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * A Toxiproxy server (Shopify's TCP fault proxy) on a free loopback port, started for a
 * test and stopped by PID (also by a shutdown hook), driven through its HTTP API. A
 * silent partition is its {@code timeout} toxic with timeout 0 on both directions:
 * nothing passes and nothing closes.
 *
 * <p>The binary: {@code TOXIPROXY_SERVER}, else {@code $(go env GOPATH)/bin/server} (what
 * {@code go install github.com/Shopify/toxiproxy/v2/cmd/server@latest} installs), else
 * {@code toxiproxy-server} on the PATH; {@link #binary()} is null when none is there.
 */
public final class Toxiproxy implements AutoCloseable {
    private static final Pattern LISTEN = Pattern.compile("\"listen\"\\s*:\\s*\"[^\"]*:(\\d+)\"");
    private final Process process;
    private final int apiPort;
    private final Path log;
    private final Thread hook;
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(5)).build();

    private Toxiproxy(Process process, int apiPort, Path log) {
        this.process = process;
        this.apiPort = apiPort;
        this.log = log;
        this.hook = new Thread(process::destroyForcibly, "stop-toxiproxy-" + process.pid());
        Runtime.getRuntime().addShutdownHook(hook);
    }

    /** The Toxiproxy server binary, or null when none is installed. */
    public static String binary() {
        String env = System.getenv("TOXIPROXY_SERVER");
        if (env != null && !env.isEmpty()) {
            return new File(env).canExecute() ? env : null;
        }
        try {
            Process p = new ProcessBuilder("go", "env", "GOPATH").redirectErrorStream(true).start();
            String gopath = new String(p.getInputStream().readAllBytes()).trim();
            if (p.waitFor() == 0 && !gopath.isEmpty()) {
                File f = new File(gopath.split(File.pathSeparator)[0], "bin/server");
                if (f.canExecute()) {
                    return f.getPath();
                }
            }
        } catch (IOException e) {
            // no go on the PATH
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (String dir : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator)) {
            File f = new File(dir, "toxiproxy-server");
            if (f.canExecute()) {
                return f.getPath();
            }
        }
        return null;
    }

    /** Starts {@code binary} on a free loopback port. */
    public static Toxiproxy start(String binary) throws IOException, InterruptedException {
        int port;
        try (ServerSocket ss = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            port = ss.getLocalPort();
        }
        Path log = Files.createTempFile("toxiproxy", ".log");
        Process p = new ProcessBuilder(binary, "-host", "127.0.0.1", "-port", Integer.toString(port))
                .redirectErrorStream(true).redirectOutput(log.toFile()).start();
        Toxiproxy t = new Toxiproxy(p, port, log);
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (true) {
            try {
                if (t.request("GET", "/version", null).statusCode() == 200) {
                    return t;
                }
            } catch (IOException e) {
                // not listening yet
            }
            if (!p.isAlive() || System.nanoTime() > deadline) {
                String out = Files.readString(log);
                t.close();
                throw new IOException("toxiproxy did not start on port " + port + ": " + out);
            }
            Thread.sleep(20);
        }
    }

    private HttpResponse<String> request(String method, String path, String body)
            throws IOException, InterruptedException {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + apiPort + path))
                .timeout(Duration.ofSeconds(10));
        b.method(method, body == null ? HttpRequest.BodyPublishers.noBody() : HttpRequest.BodyPublishers.ofString(body));
        if (body != null) {
            b.header("Content-Type", "application/json");
        }
        return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
    }

    private String call(String method, String path, String body) throws IOException, InterruptedException {
        HttpResponse<String> r = request(method, path, body);
        if (r.statusCode() / 100 != 2) {
            throw new IOException(method + " " + path + " answered " + r.statusCode() + ": " + r.body());
        }
        return r.body();
    }

    /** A proxy on a free loopback port to {@code upstreamPort}; its port is {@link Proxy#port()}. */
    public Proxy proxy(String name, int upstreamPort) throws IOException, InterruptedException {
        String body = call("POST", "/proxies", "{\"name\":\"" + name + "\",\"listen\":\"127.0.0.1:0\",\"upstream\":"
                + "\"127.0.0.1:" + upstreamPort + "\",\"enabled\":true}");
        Matcher m = LISTEN.matcher(body);
        if (!m.find()) {
            throw new IOException("no listen port in " + body);
        }
        return new Proxy(name, Integer.parseInt(m.group(1)));
    }

    /** One proxy of this server. */
    public final class Proxy {
        private final String name;
        private final int port;

        Proxy(String name, int port) {
            this.name = name;
            this.port = port;
        }

        /** The port clients connect to. */
        public int port() {
            return port;
        }

        /** A silent partition: nothing passes either way, nothing closes. */
        public void partition() throws IOException, InterruptedException {
            for (String stream : new String[] {"upstream", "downstream"}) {
                call("POST", "/proxies/" + name + "/toxics", "{\"name\":\"cut_" + stream + "\",\"type\":\"timeout\","
                        + "\"stream\":\"" + stream + "\",\"toxicity\":1.0,\"attributes\":{\"timeout\":0}}");
            }
        }

        /** Ends a partition. */
        public void heal() throws IOException, InterruptedException {
            for (String stream : new String[] {"upstream", "downstream"}) {
                request("DELETE", "/proxies/" + name + "/toxics/cut_" + stream, null);
            }
        }
    }

    /** Stops the server by PID. */
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
        try {
            Files.deleteIfExists(log);
        } catch (IOException e) {
            // best effort
        }
    }
}

package io.dlock.core;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.dlock.DeadlockException;
import io.dlock.NotHeldException;
import io.dlock.UnexpectedReplyException;
import io.dlock.UnknownCommandException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

class ProtocolTest {
    private static List<String> strs(byte[][] a) {
        return Arrays.stream(a).map(b -> new String(b, StandardCharsets.UTF_8)).toList();
    }

    @Test
    void acquireArguments() {
        byte[] k = Commands.bytes("k");
        assertEquals(List.of("DLOCK.ACQUIRE", "k", "o", "PX", "30000", "WAIT", "0"),
                strs(Commands.acquire(Kind.MUTEX, k, "o", 30000, 0, Commands.AcquireOptions.NONE)));
        assertEquals(List.of("DLOCK.RWACQUIRE", "k", "o", "READ", "PX", "1", "WAIT", "5000", "BIND", "LOCKDELAY", "7"),
                strs(Commands.acquire(Kind.READ, k, "o", 0, 5000, new Commands.AcquireOptions(0, 1, true, 7))));
        assertEquals(List.of("DLOCK.SEMACQUIRE", "k", "o", "LIMIT", "3", "PERMITS", "2", "PX", "10", "WAIT", "0"),
                strs(Commands.acquire(Kind.SEMAPHORE, k, "o", 10, -5, new Commands.AcquireOptions(3, 2, false, 0))));
        assertEquals(List.of("DLOCK.RELEASE", "k", "o", "WRITE"), strs(Commands.release(Kind.WRITE, k, "o", 1)));
        assertEquals(List.of("DLOCK.CANCEL", "k", "o"), strs(Commands.cancel(k, "o")));
    }

    @Test
    void channels() {
        assertArrayEquals(Commands.bytes("dlock:{orders}"), Commands.channel(Commands.bytes("orders")));
        assertArrayEquals(Commands.bytes("dlock:{u1}:x"), Commands.channel(Commands.bytes("{u1}:x")));
        assertArrayEquals(Commands.bytes("dlock:{{}x}"), Commands.channel(Commands.bytes("{}x")));
    }

    @Test
    void replies() {
        assertNull(Replies.token(null));
        assertEquals(5L, Replies.token(5L));
        assertThrows(UnexpectedReplyException.class, () -> Replies.token(Commands.bytes("OK")));
        var info = Replies.info(List.of(Commands.bytes("kind"), Commands.bytes("mutex"), Commands.bytes("holders"),
                List.of(List.of(Commands.bytes("owner"), Commands.bytes("o"), Commands.bytes("count"), 2L))));
        assertEquals("mutex", info.get("kind"));
        assertEquals("o", Replies.holders(info).get(0).get("owner"));
        assertEquals(2L, Replies.holders(info).get(0).get("count"));
    }

    @Test
    void errors() {
        assertInstanceOf(NotHeldException.class, Errors.fromServer("NOTHELD the owner does not hold", "DLOCK.RELEASE"));
        var u = Errors.fromServer("ERR unknown command 'DLOCK.CANCEL', with args beginning with: ", "DLOCK.CANCEL");
        assertInstanceOf(UnknownCommandException.class, u);
        assertTrue(u.getMessage().contains("is the dlock module loaded?"));
        var d = (DeadlockException) Errors.fromServer(
                "DEADLOCK cycle: \"a\\\"1\" waits for \"b\" on \"k1\", \"b\" waits for \"a\\\"1\" on \"k\\x002\"", "x");
        assertEquals(2, d.cycle().size());
        assertEquals("a\"1", d.cycle().get(0).owner());
        assertEquals(List.of("k1", "k\u00002"), d.keys());
        assertEquals(List.of(), ((DeadlockException) Errors.fromServer("DEADLOCK another reader waits", "x")).cycle());
    }
}

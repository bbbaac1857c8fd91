package io.dlock.lettuce;

import io.lettuce.core.codec.ByteArrayCodec;
import io.lettuce.core.output.CommandOutput;
import java.nio.ByteBuffer;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;

/** Any reply as the core expects it: null, Long, byte[], nested List (RESP3 maps flattened). */
final class AnyOutput extends CommandOutput<byte[], byte[], Object> {
    private final Deque<List<Object>> stack = new ArrayDeque<>();

    AnyOutput() {
        super(ByteArrayCodec.INSTANCE, null);
    }

    private void add(Object v) {
        if (stack.isEmpty()) {
            output = v;
        } else {
            stack.peek().add(v);
        }
    }

    private static byte[] copy(ByteBuffer b) {
        if (b == null) {
            return null;
        }
        byte[] out = new byte[b.remaining()];
        b.duplicate().get(out);
        return out;
    }

    @Override
    public void set(ByteBuffer bytes) {
        add(copy(bytes));
    }

    @Override
    public void setSingle(ByteBuffer bytes) {
        add(copy(bytes));
    }

    @Override
    public void setBigNumber(ByteBuffer bytes) {
        add(copy(bytes));
    }

    @Override
    public void set(long integer) {
        add(integer);
    }

    @Override
    public void set(double number) {
        add(number);
    }

    @Override
    public void set(boolean value) {
        add(value ? 1L : 0L);
    }

    @Override
    public void multi(int count) {
        if (count < 0) {
            add(null);
            return;
        }
        List<Object> l = new ArrayList<>(Math.min(count, 1024));
        add(l);
        stack.push(l);
    }

    @Override
    public void multiArray(int count) {
        multi(count);
    }

    @Override
    public void multiSet(int count) {
        multi(count);
    }

    @Override
    public void multiPush(int count) {
        multi(count);
    }

    @Override
    public void multiMap(int count) {
        multi(count < 0 ? count : count * 2);
    }

    @Override
    public void complete(int depth) {
        while (stack.size() > depth) {
            stack.pop();
        }
    }
}

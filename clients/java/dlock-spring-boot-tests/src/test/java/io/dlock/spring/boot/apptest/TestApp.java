package io.dlock.spring.boot.apptest;

import org.springframework.boot.autoconfigure.SpringBootApplication;

/** The test application: nothing of its own, everything from the starters on the classpath. */
@SpringBootApplication
public class TestApp {
}

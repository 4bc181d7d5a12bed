package brook;

import java.util.Arrays;

/**
 * Brook's end-to-end checks with Apache Kafka's own Java client, run by the
 * Rust tests in tests/tests/e2e/java_*.rs as
 * {@code java -cp <jars> brook.ClientChecks <scenario> <bootstrap> [args]}.
 *
 * <p>Each scenario prints {@code name value} lines that the Rust test asserts
 * on (see {@link Report}); a check that throws prints {@code name.error} with
 * the exception instead of its values and the run goes on, so one failure
 * does not hide the others. Every wait is bounded ({@link Kafka#WAIT}).
 */
public final class ClientChecks {
    private ClientChecks() {}

    public static void main(String[] args) throws Exception {
        if (args.length < 2) {
            System.err.println("usage: ClientChecks <scenario> <bootstrap> [args]");
            System.exit(2);
        }
        String bootstrap = args[1];
        String[] rest = Arrays.copyOfRange(args, 2, args.length);
        Report.put("kafka", org.apache.kafka.common.utils.AppInfoParser.getVersion());
        switch (args[0]) {
            case "producer" -> ProducerChecks.run(bootstrap);
            case "consumer" -> ConsumerChecks.run(bootstrap);
            case "admin" -> AdminChecks.run(bootstrap);
            case "transactions" -> TransactionChecks.run(bootstrap);
            case "format-produce" -> FormatRecords.produce(bootstrap);
            case "streams-input" -> WordCount.input(bootstrap, rest);
            case "streams-run" -> WordCount.runApplication(bootstrap, rest);
            case "streams-verify" -> WordCount.verify(bootstrap, rest);
            default -> {
                System.err.println("unknown scenario " + args[0]);
                System.exit(2);
            }
        }
        // Kafka's client threads are daemons, but a stuck one must not keep
        // the test waiting.
        System.exit(0);
    }
}

// Kafka's own producer (KafkaProducer, its RecordAccumulator cutting batches) sending the records
// read from stdin to partition 0 of a topic, so tests can hold kfs's batch cuts against the
// batches it leaves in a broker's log. Run as a single-file program on Kafka's jars:
//   java -cp '<kafka libs>/*' ProduceRecords.java BOOTSTRAP TOPIC BATCH_SIZE < records
// One record per line, tab-separated: timestamp (epoch ms), key, value, headers; key and value
// base64 or "-" for null; headers "" or comma-separated "name:value" with both base64 (value
// "-" for null). linger.ms is long, so only batch.size cuts a batch (and the final flush);
// idempotence is off, so the batches carry no producer id, as kfs's appends do.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.Future;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArraySerializer;

public class ProduceRecords {
    private static byte[] bytes(String field) {
        return field.equals("-") ? null : Base64.getDecoder().decode(field);
    }

    private static List<Header> headers(String field) {
        List<Header> headers = new ArrayList<>();
        if (field.isEmpty()) return headers;
        for (String pair : field.split(",", -1)) {
            String[] kv = pair.split(":", 2);
            String name = new String(Base64.getDecoder().decode(kv[0]), StandardCharsets.UTF_8);
            headers.add(new RecordHeader(name, bytes(kv[1])));
        }
        return headers;
    }

    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        config.put("bootstrap.servers", args[0]);
        config.put("batch.size", args[2]);
        config.put("linger.ms", "600000");
        config.put("enable.idempotence", "false");
        config.put("acks", "all");
        config.put("compression.type", "none");
        config.put("max.in.flight.requests.per.connection", "1");
        config.put("key.serializer", ByteArraySerializer.class.getName());
        config.put("value.serializer", ByteArraySerializer.class.getName());
        List<Future<RecordMetadata>> sent = new ArrayList<>();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(config);
             BufferedReader in = new BufferedReader(
                     new InputStreamReader(System.in, StandardCharsets.US_ASCII))) {
            String line;
            while ((line = in.readLine()) != null) {
                String[] f = line.split("\t", -1);
                sent.add(producer.send(new ProducerRecord<>(args[1], 0, Long.parseLong(f[0]),
                        bytes(f[1]), bytes(f[2]), headers(f[3]))));
            }
            producer.flush();
            for (Future<RecordMetadata> result : sent) result.get();
        }
        System.out.println(sent.size());
    }
}

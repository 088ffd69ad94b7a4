// Hadoop's in-process HDFS (MiniDFSCluster), and optionally YARN (MiniYARNCluster), for the tests:
// a real NameNode and DataNodes on 127.0.0.1, started by tests/hadoop/minidfs.py (compiled by
// scripts/fetch-test-jars against hadoop-client-minicluster and pyspark's Hadoop 3.5.0 jars).
//
//   java -cp CP TfosMiniCluster --conf-dir DIR --data-dir DIR [--namenode-port 0] [--datanodes 1]
//                               [--replication N] [--conf KEY=VALUE]... [--yarn] [--nodemanager-mb 4096]
//                               [--nodemanager-vcores 4]
//
// Port 0 (the default) lets the NameNode bind a free port. When everything is up it writes the client
// configuration (core-site.xml, hdfs-site.xml and with --yarn yarn-site.xml) into --conf-dir, for
// HADOOP_CONF_DIR, and then prints one line per service, the last one READY:
//   HDFS hdfs://127.0.0.1:PORT
//   YARN 127.0.0.1:PORT            (with --yarn: the ResourceManager's address)
//   READY
// It runs until its standard input reaches end of file (the parent that holds the pipe exited or
// closed it: the clusters are shut down, then it exits), or until it gets TERM or KILL.
//
// Meanwhile each line on standard input is a command, `SEQ VERB [ARG]`, for the fault tests (a
// DataNode lost while a job writes); the answer is one line, `REPLY SEQ key=value ...` or
// `FAILED SEQ why`:
//   datanodes               names=127.0.0.1:PORT,...   the running DataNodes (transfer addresses)
//   stop-datanode NAME      name=... replicas=N        shut it down (the NameNode is not told: it
//                                                      declares it dead when its heartbeats stop)
//   restart-datanodes       restarted=N                every stopped one, on its port and storage
//   state                   live= dead= blocks= replicas= under_replicated= missing= pending= replicated=
//                           (replicas: on the live DataNodes, as the NameNode knows them; replicated:
//                           replicas the running DataNodes copied at the NameNode's request)
// --replication N (default: the DataNodes, at most 3) and --conf KEY=VALUE (any number) set the
// cluster's configuration, e.g. shorter heartbeats so that a lost DataNode is noticed in seconds.
import java.io.BufferedReader;
import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.reflect.Field;
import java.net.URI;
import java.net.URISyntaxException;
import java.nio.file.Files;
import java.nio.charset.StandardCharsets;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.hdfs.protocol.BlockListAsLongs;
import org.apache.hadoop.hdfs.protocol.HdfsConstants.DatanodeReportType;
import org.apache.hadoop.hdfs.server.blockmanagement.DatanodeDescriptor;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.hdfs.server.namenode.FSNamesystem;
import org.apache.hadoop.metrics2.lib.MutableCounterLong;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;

public class TfosMiniCluster {
  private static MiniDFSCluster dfs;
  private static MiniYARNCluster yarn;
  private static final AtomicBoolean stopped = new AtomicBoolean();
  private static final List<MiniDFSCluster.DataNodeProperties> stoppedDataNodes = new ArrayList<>();

  public static void main(String[] args) throws Exception {
    String confDir = null, dataDir = null;
    int nnPort = 0, datanodes = 1, nmMb = 4096, nmVcores = 4, replication = 0;
    boolean withYarn = false;
    Map<String, String> extra = new LinkedHashMap<>();
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--conf-dir": confDir = args[++i]; break;
        case "--data-dir": dataDir = args[++i]; break;
        case "--namenode-port": nnPort = Integer.parseInt(args[++i]); break;
        case "--datanodes": datanodes = Integer.parseInt(args[++i]); break;
        case "--replication": replication = Integer.parseInt(args[++i]); break;
        case "--conf": {
          String[] kv = args[++i].split("=", 2);
          if (kv.length != 2) usage("--conf wants KEY=VALUE, got " + args[i]);
          extra.put(kv[0], kv[1]);
          break;
        }
        case "--yarn": withYarn = true; break;
        case "--nodemanager-mb": nmMb = Integer.parseInt(args[++i]); break;
        case "--nodemanager-vcores": nmVcores = Integer.parseInt(args[++i]); break;
        default: usage("unknown argument " + args[i]);
      }
    }
    if (confDir == null || dataDir == null) usage("--conf-dir and --data-dir are required");
    new File(confDir).mkdirs();
    // On TERM the JVM just exits: the data is throwaway, and Hadoop's own shutdown hooks close what
    // needs closing (stopping the clusters from a hook fails: they remove hooks of their own).

    Configuration hdfsConf = new Configuration();
    hdfsConf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, new File(dataDir, "hdfs").getAbsolutePath());
    hdfsConf.set("dfs.namenode.rpc-address", "127.0.0.1:" + nnPort);
    if (replication <= 0) replication = Math.min(datanodes, 3);
    hdfsConf.setInt("dfs.replication", replication);
    extra.forEach(hdfsConf::set);
    dfs = new MiniDFSCluster.Builder(hdfsConf)
        .nameNodePort(nnPort)
        .numDataNodes(datanodes)
        .format(true)
        .build();
    dfs.waitActive();
    int port = dfs.getNameNodePort();
    // 127.0.0.1, not localhost: the NameNode binds loopback IPv4 only, and the same authority is then
    // used everywhere (fs.defaultFS, the tests' URLs), so paths never mix two names for one file system.
    String fsUri = "hdfs://127.0.0.1:" + port;

    Configuration core = new Configuration(false);
    core.set("fs.defaultFS", fsUri);
    writeXml(core, confDir, "core-site.xml");
    Configuration hdfsSite = new Configuration(false);
    hdfsSite.setInt("dfs.replication", replication);
    writeXml(hdfsSite, confDir, "hdfs-site.xml");
    System.out.println("HDFS " + fsUri);

    if (withYarn) {
      YarnConfiguration y = new YarnConfiguration();
      y.set("fs.defaultFS", fsUri);
      // FIFO: the capacity scheduler wants queue definitions this throwaway cluster does not need
      y.set("yarn.resourcemanager.scheduler.class",
          "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler");
      y.setInt("yarn.nodemanager.resource.memory-mb", nmMb);
      // MiniYARNCluster gives its NodeManagers this one instead (default 4096 MB)
      y.setInt(YarnConfiguration.YARN_MINICLUSTER_NM_PMEM_MB, nmMb);
      y.setInt("yarn.nodemanager.resource.cpu-vcores", nmVcores);
      y.setInt("yarn.scheduler.minimum-allocation-mb", 256);
      y.setInt("yarn.scheduler.maximum-allocation-mb", nmMb);
      y.setInt("yarn.scheduler.maximum-allocation-vcores", nmVcores);
      y.setBoolean("yarn.nodemanager.vmem-check-enabled", false);  // TensorFlow maps far more than it uses
      y.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
      // Without Hadoop's native library the NodeManager's local file system sets permissions with one
      // `chmod` process per file, and localizing a 25,000-file venv archive takes minutes; a real
      // NodeManager has the native library. Same result through java.nio, without the processes.
      y.set("fs.AbstractFileSystem.file.impl", NioLocalFs.class.getName());
      yarn = new MiniYARNCluster("tfos", 1, 1, 1);
      yarn.init(y);
      yarn.start();
      writeXml(yarn.getConfig(), confDir, "yarn-site.xml");
      System.out.println("YARN " + yarn.getConfig().get(YarnConfiguration.RM_ADDRESS));
    }
    System.out.println("READY");
    System.out.flush();

    // Commands until the parent goes away (end of file on stdin), or TERM/KILL.
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    try {
      String line;
      while ((line = in.readLine()) != null) {
        if (!line.isBlank()) command(line.trim().split("\\s+"));
      }
    } catch (IOException e) {
      // stdin closed under us: treat as end of file
    }
    System.out.println("stdin closed: shutting down");
    System.out.flush();
    shutdown();
    System.exit(0);
  }

  private static void command(String[] words) {
    String seq = words[0];
    String answer;
    try {
      answer = "REPLY " + seq + " " + run(words.length > 1 ? words[1] : "", words.length > 2 ? words[2] : "");
    } catch (Throwable t) {
      answer = "FAILED " + seq + " " + String.valueOf(t).replace('\n', ' ');
    }
    System.out.println(answer);
    System.out.flush();
  }

  private static String run(String verb, String arg) throws Exception {
    switch (verb) {
      case "datanodes": {
        List<String> names = new ArrayList<>();
        for (DataNode dn : dfs.getDataNodes()) names.add(dn.getDatanodeId().getXferAddr());
        return "names=" + String.join(",", names);
      }
      case "stop-datanode": {
        List<DataNode> running = dfs.getDataNodes();
        for (int i = 0; i < running.size(); i++) {
          if (!running.get(i).getDatanodeId().getXferAddr().equals(arg)) continue;
          long replicas = 0;
          for (BlockListAsLongs report : dfs.getBlockReport(dfs.getNamesystem().getBlockPoolId(), i).values()) {
            replicas += report.getNumberOfBlocks();
          }
          stoppedDataNodes.add(dfs.stopDataNode(i));
          return "name=" + arg + " replicas=" + replicas;
        }
        throw new IllegalArgumentException("no running DataNode " + arg);
      }
      case "restart-datanodes": {
        int n = stoppedDataNodes.size();
        for (MiniDFSCluster.DataNodeProperties dn : stoppedDataNodes) dfs.restartDataNode(dn, true);
        stoppedDataNodes.clear();
        dfs.waitActive();
        return "restarted=" + n;
      }
      case "state": {
        FSNamesystem ns = dfs.getNamesystem();
        long replicated = 0;
        Field counter = dfs.getDataNodes().isEmpty() ? null
            : dfs.getDataNodes().get(0).getMetrics().getClass().getDeclaredField("blocksReplicated");
        if (counter != null) counter.setAccessible(true);
        for (DataNode dn : dfs.getDataNodes()) replicated += ((MutableCounterLong) counter.get(dn.getMetrics())).value();
        long replicas = 0;
        for (DatanodeDescriptor d : ns.getBlockManager().getDatanodeManager().getDatanodeListForReport(DatanodeReportType.LIVE)) {
          replicas += d.numBlocks();
        }
        return "live=" + ns.getNumLiveDataNodes() + " dead=" + ns.getNumDeadDataNodes() + " blocks=" + ns.getBlocksTotal()
            + " replicas=" + replicas
            + " under_replicated=" + ns.getUnderReplicatedBlocks() + " missing=" + ns.getMissingBlocksCount()
            + " pending=" + ns.getPendingReconstructionBlocks() + " replicated=" + replicated;
      }
      default:
        throw new IllegalArgumentException("unknown command " + verb);
    }
  }

  private static void shutdown() {
    if (!stopped.compareAndSet(false, true)) return;
    try {
      if (yarn != null) yarn.stop();
    } catch (Throwable t) {
      System.err.println("stopping YARN: " + t);
    }
    try {
      if (dfs != null) dfs.shutdown();
    } catch (Throwable t) {
      System.err.println("stopping HDFS: " + t);
    }
  }

  /** Hadoop's local file system with permissions set through java.nio (see above). */
  public static class NioRawLocalFileSystem extends RawLocalFileSystem {
    @Override
    public void setPermission(Path p, FsPermission permission) throws IOException {
      String rwx = permission.toString();
      if (rwx.length() != 9 || rwx.matches(".*[sStT].*")) {  // setuid, setgid, sticky: Hadoop's own way
        super.setPermission(p, permission);
        return;
      }
      Files.setPosixFilePermissions(pathToFile(p).toPath(), PosixFilePermissions.fromString(rwx));
    }
  }

  public static class NioRawLocalFs extends DelegateToFileSystem {
    public NioRawLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(uri, new NioRawLocalFileSystem(), conf, "file", false);
    }

    @Override
    public int getUriDefaultPort() {
      return -1;
    }

    @Override
    public boolean isValidName(String src) {
      return true;
    }
  }

  public static class NioLocalFs extends ChecksumFs {
    public NioLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
      super(new NioRawLocalFs(uri, conf));
    }
  }

  // Written to a temporary file first and renamed: a reader never sees a half-written file.
  private static void writeXml(Configuration conf, String dir, String name) throws IOException {
    File tmp = new File(dir, "." + name + ".tmp");
    try (FileOutputStream out = new FileOutputStream(tmp)) {
      conf.writeXml(out);
    }
    if (!tmp.renameTo(new File(dir, name))) throw new IOException("cannot rename " + tmp + " to " + name);
  }

  private static void usage(String why) {
    System.err.println("TfosMiniCluster: " + why);
    System.err.println("usage: TfosMiniCluster --conf-dir DIR --data-dir DIR [--namenode-port 0] [--datanodes 1]"
        + " [--replication N] [--conf KEY=VALUE]... [--yarn] [--nodemanager-mb 4096] [--nodemanager-vcores 4]");
    System.exit(2);
  }
}

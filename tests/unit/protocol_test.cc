// protocol/messages.h: every message round-trips, today's wire JSON parses, every type error is refused with a
// message naming the field, nesting is bounded, serializing never throws.
#include "protocol/messages.h"
#include "protocol/log_limits.h"

#include "protocol/field_limits.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace gpupack::protocol {
namespace {

TaskReport SampleReport() {
  TaskReport r;
  r.task_arn = "arn:aws:ecs:us-east-1:000000000000:task/default/0123abcd";
  r.status = TaskStatus::kStopped;
  r.stop_code = StopCode::kEssentialContainerExited;
  r.reason = "Essential container in task exited";
  r.containers.push_back({"main", TaskStatus::kStopped, 3, "killed by signal 9"});
  r.containers.push_back({"side", TaskStatus::kRunning, std::nullopt, ""});
  return r;
}

Assignment SampleAssignment() {
  Assignment a;
  a.task_arn = "arn:aws:ecs:us-east-1:000000000000:task/default/0123abcd";
  a.cluster = "default";
  a.task_definition_arn = "arn:aws:ecs:us-east-1:000000000000:task-definition/train:3";
  a.desired_status = TaskStatus::kRunning;
  AssignedContainer c;
  c.name = "main";
  c.image = "busybox";
  c.essential = true;
  c.gpu_ids = {"GPU-0", "GPU-1"};
  c.mps = MpsLimits{4096, 50};
  c.entry_point = {"/bin/sh", "-c"};
  c.command = {"exec sleep 60"};
  c.environment = {{"A", "1"}, {"B", ""}};
  c.override_environment = {{"A", "2"}};
  c.cpu = 512;
  c.memory = 64;
  c.memory_reservation = 32;
  a.containers.push_back(c);
  AssignedContainer bare;
  bare.name = "sidecar";
  bare.essential = false;
  a.containers.push_back(bare);
  return a;
}

template <typename M>
M ParsedAgent(const std::string& text) {
  auto m = ParseAgentMessage(text);
  EXPECT_TRUE(m.ok()) << m.status().message() << "\n" << text;
  if (!m.ok() || !std::holds_alternative<M>(*m)) {
    ADD_FAILURE() << "not the expected message: " << text;
    return M{};
  }
  return std::get<M>(*m);
}

template <typename M>
M ParsedServer(const std::string& text) {
  auto m = ParseServerMessage(text);
  EXPECT_TRUE(m.ok()) << m.status().message() << "\n" << text;
  if (!m.ok() || !std::holds_alternative<M>(*m)) {
    ADD_FAILURE() << "not the expected message: " << text;
    return M{};
  }
  return std::get<M>(*m);
}

// ---- round trips --------------------------------------------------------------------------------------------

TEST(ProtocolTest, EveryAgentMessageRoundTrips) {
  Hello hello{{SampleReport(), TaskReport{"arn:t/2", TaskStatus::kPending, std::nullopt, "", {}}}, true};
  EXPECT_EQ(ParsedAgent<Hello>(Serialize(AgentMessage(hello))), hello);
  EXPECT_EQ(ParsedAgent<Hello>(Serialize(AgentMessage(Hello{}))), Hello{});
  StateReport state{42, SampleReport()};
  EXPECT_EQ(ParsedAgent<StateReport>(Serialize(AgentMessage(state))), state);
  for (StopCode code : {StopCode::kTaskFailedToStart, StopCode::kEssentialContainerExited, StopCode::kUserInitiated,
                        StopCode::kServiceSchedulerInitiated, StopCode::kSpotInterruption,
                        StopCode::kTerminationNotice, StopCode::kInfrastructureHealth}) {
    state.report.stop_code = code;
    EXPECT_EQ(ParsedAgent<StateReport>(Serialize(AgentMessage(state))), state) << Name(code);
  }
  Heartbeat hb{7, true, {"GPU-a", "GPU-b"}};
  EXPECT_EQ(ParsedAgent<Heartbeat>(Serialize(AgentMessage(hb))), hb);
  EXPECT_EQ(ParsedAgent<Ack>(Serialize(AgentMessage(Ack{9}))), Ack{9});
}

TEST(ProtocolTest, EveryServerMessageRoundTrips) {
  Welcome welcome{{SampleAssignment()}, {{"arn:t/1", "the task was stopped while the agent was away"}}, 200};
  EXPECT_EQ(ParsedServer<Welcome>(Serialize(ServerMessage(welcome))), welcome);
  EXPECT_EQ(ParsedServer<Welcome>(Serialize(ServerMessage(Welcome{}))), Welcome{});
  Assign assign{3, SampleAssignment()};
  EXPECT_EQ(ParsedServer<Assign>(Serialize(ServerMessage(assign))), assign);
  assign.task.desired_status = TaskStatus::kStopped;
  EXPECT_EQ(ParsedServer<Assign>(Serialize(ServerMessage(assign))), assign);
  Stop stop{4, {"arn:t/1", "enough"}};
  EXPECT_EQ(ParsedServer<Stop>(Serialize(ServerMessage(stop))), stop);
  EXPECT_EQ(ParsedServer<Ack>(Serialize(ServerMessage(Ack{5}))), Ack{5});
  Error error{6, "task arn:t/1 is not on this instance"};
  EXPECT_EQ(ParsedServer<Error>(Serialize(ServerMessage(error))), error);
  Error no_id{std::nullopt, "unknown message type 'x'"};
  EXPECT_EQ(ParsedServer<Error>(Serialize(ServerMessage(no_id))), no_id);
  Error coded{7, "the hello's parts pass 1 bytes", RefusalCode::kTooLarge};
  EXPECT_EQ(ParsedServer<Error>(Serialize(ServerMessage(coded))), coded);
}

// An error's code is on the wire as RefusalCode's name; one a peer does not know reads as none (never a parse
// failure), and the message's words play no part in it.
TEST(ProtocolTest, AnErrorCarriesItsCode) {
  EXPECT_EQ(Json::parse(Serialize(ServerMessage(Error{3, "whatever", RefusalCode::kMalformed}))),
            Json::parse(R"({"type":"error","message":"whatever","code":"Malformed","id":3})"));
  EXPECT_EQ(Json::parse(Serialize(ServerMessage(Error{std::nullopt, "m"}))),
            Json::parse(R"({"type":"error","message":"m"})"));
  EXPECT_EQ(ParsedServer<Error>(R"({"type":"error","message":"m","code":"Rejected"})").code, RefusalCode::kRejected);
  EXPECT_EQ(ParsedServer<Error>(R"({"type":"error","message":"m","code":"FromTheFuture"})"),
            (Error{std::nullopt, "m"}));
  EXPECT_FALSE(ParseServerMessage(R"({"type":"error","message":"m","code":7})").ok());
}

TEST(ProtocolTest, LogRequestsAndAnswersRoundTripAndParseAsDocumented) {
  LogsRequest req{8, "arn:t/1", "web", false, 1234, 10, 20, {"GET", "a b"}, 50, 4096};
  EXPECT_EQ(ParsedServer<LogsRequest>(Serialize(ServerMessage(req))), req);
  LogsRequest plain{9, "arn:t/1", "web", true, std::nullopt, std::nullopt, std::nullopt, {}, 10000, 512 * 1024};
  EXPECT_EQ(ParsedServer<LogsRequest>(Serialize(ServerMessage(plain))), plain);
  LogsRequest defaults;  // what a request that gives only the required fields means
  defaults.id = 3;
  defaults.task_arn = "arn:t/1";
  defaults.container_name = "c";
  EXPECT_EQ(ParsedServer<LogsRequest>(R"({"type":"logs","id":3,"taskArn":"arn:t/1","containerName":"c"})"),
            defaults);
  LogsAnswer answer{8, true, {{100, "one"}, {101, ""}}, 400, 200, true, ""};
  EXPECT_EQ(ParsedAgent<LogsAnswer>(Serialize(AgentMessage(answer))), answer);
  LogsAnswer failed{9, false, {}, 0, 0, false, "cannot read"};
  EXPECT_EQ(ParsedAgent<LogsAnswer>(Serialize(AgentMessage(failed))), failed);
  // Required fields and bounds are named.
  auto no_container = ParseServerMessage(R"({"type":"logs","id":3,"taskArn":"arn:t/1"})");
  ASSERT_FALSE(no_container.ok());
  EXPECT_EQ(no_container.status().message(), "logs.containerName is required");
  EXPECT_FALSE(ParseServerMessage(R"({"type":"logs","id":3,"taskArn":"a","containerName":"c","maxBytes":2000000})").ok());
  // A request's terms are bounded (kMaxLogTerms, kMaxFilterPatternBytes together), whoever sends it.
  Json many = {{"type", "logs"}, {"id", 3}, {"taskArn", "a"}, {"containerName", "c"},
               {"terms", std::vector<std::string>(kMaxLogTerms, "t")}};
  EXPECT_TRUE(ParseServerMessage(many.dump()).ok());
  many["terms"].push_back("t");
  auto too_many = ParseServerMessage(many.dump());
  ASSERT_FALSE(too_many.ok());
  EXPECT_EQ(too_many.status().message(), "logs.terms must be at most 32 terms of at most 1024 bytes together");
  many["terms"] = {std::string(kMaxFilterPatternBytes, 'x'), "y"};
  EXPECT_FALSE(ParseServerMessage(many.dump()).ok());
  auto bad_event = ParseAgentMessage(R"({"type":"logEvents","id":3,"events":[{"timestamp":"x","message":"m"}]})");
  ASSERT_FALSE(bad_event.ok());
  EXPECT_EQ(bad_event.status().message(), "logEvents.events[0].timestamp must be an integer");
}

TEST(ProtocolTest, ConvertersRoundTripAndNameThePath) {
  EXPECT_EQ(*TaskReportFromJson(ToJson(SampleReport()), "record.report"), SampleReport());
  EXPECT_EQ(*AssignmentFromJson(ToJson(SampleAssignment()), "record.assignment"), SampleAssignment());
  Json bad = ToJson(SampleAssignment());
  bad["containers"][1]["cpu"] = "lots";
  auto a = AssignmentFromJson(bad, "record.assignment");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().message(), "record.assignment.containers[1].cpu must be an integer");
}

// ---- today's wire ----------------------------------------------------------------------------------------------

TEST(ProtocolTest, TodaysAgentMessagesParse) {
  // As the agent has always written them.
  auto hello = ParsedAgent<Hello>(R"({"type":"hello","tasks":[{"taskArn":"arn:t/1","status":"RUNNING",
      "containers":[{"containerName":"main","status":"RUNNING"}]},{"taskArn":"arn:t/2","status":"STOPPED",
      "reason":"Essential container in task exited","stopCode":"EssentialContainerExited",
      "containers":[{"containerName":"main","status":"STOPPED","exitCode":0,"reason":"done"}]}],"impaired":false})");
  ASSERT_EQ(hello.tasks.size(), 2u);
  EXPECT_EQ(hello.tasks[0].status, TaskStatus::kRunning);
  EXPECT_FALSE(hello.tasks[0].stop_code.has_value());
  EXPECT_EQ(hello.tasks[1].stop_code, StopCode::kEssentialContainerExited);
  EXPECT_EQ(hello.tasks[1].containers[0].exit_code, 0);
  EXPECT_EQ(hello.tasks[1].containers[0].reason, "done");

  auto state = ParsedAgent<StateReport>(R"({"type":"state","id":12,"taskArn":"arn:t/1","status":"STOPPED",
      "stopCode":"TaskFailedToStart","reason":"CannotStartContainerError: exec failed",
      "containers":[{"containerName":"main","status":"STOPPED","reason":"CannotStartContainerError: exec failed"}]})");
  EXPECT_EQ(state.id, 12);
  EXPECT_EQ(state.report.task_arn, "arn:t/1");
  EXPECT_EQ(state.report.stop_code, StopCode::kTaskFailedToStart);

  auto hb = ParsedAgent<Heartbeat>(R"({"type":"heartbeat","id":13,"impaired":true,"heldGpus":["GPU-x"]})");
  EXPECT_EQ(hb, (Heartbeat{13, true, {"GPU-x"}}));
  EXPECT_EQ(ParsedAgent<Ack>(R"({"type":"ack","id":14})"), Ack{14});
}

TEST(ProtocolTest, TodaysServerMessagesParse) {
  // As ControlPlane::AssignmentFor renders a task whose definition has an override, and one whose definition is
  // gone (no entryPoint, command, environment, cpu).
  const std::string assign_text = R"({"type":"assign","id":31,"task":{"taskArn":"arn:t/1","cluster":"default",
      "taskDefinitionArn":"arn:td/train:1","desiredStatus":"RUNNING","containers":[
      {"name":"main","image":"busybox","essential":true,"gpuIds":["GPU-0"],"mps":{"memory":4096,"maxComputePercent":25},
       "entryPoint":["/bin/sh","-c"],"command":["exec sleep 60"],"environment":[{"name":"A","value":"1"}],
       "cpu":0,"memory":64,"overrideEnvironment":[{"name":"B","value":"2"}],"memoryReservation":32},
      {"name":"gone","image":"x","essential":false,"gpuIds":[]}]}})";
  auto assign = ParsedServer<Assign>(assign_text);
  EXPECT_EQ(assign.id, 31);
  ASSERT_EQ(assign.task.containers.size(), 2u);
  const AssignedContainer& c = assign.task.containers[0];
  EXPECT_EQ(c.mps, (MpsLimits{4096, 25}));
  EXPECT_EQ(c.entry_point, (std::vector<std::string>{"/bin/sh", "-c"}));
  EXPECT_EQ(c.environment, (std::vector<KeyValuePair>{{"A", "1"}}));
  EXPECT_EQ(c.override_environment, (std::vector<KeyValuePair>{{"B", "2"}}));
  EXPECT_EQ(c.memory, 64);
  EXPECT_EQ(c.memory_reservation, 32);
  const AssignedContainer& gone = assign.task.containers[1];
  EXPECT_FALSE(gone.essential);
  EXPECT_TRUE(gone.entry_point.empty() && gone.command.empty() && gone.environment.empty());
  EXPECT_FALSE(gone.mps || gone.memory || gone.memory_reservation);
  EXPECT_EQ(gone.cpu, 0);

  auto welcome = ParsedServer<Welcome>(R"({"type":"welcome","assign":[{"taskArn":"arn:t/2","cluster":"default",
      "taskDefinitionArn":"arn:td/x:1","desiredStatus":"STOPPED","containers":[]}],
      "stop":[{"taskArn":"arn:t/3","reason":"the server does not know this task"}],"heartbeatIntervalMs":200})");
  ASSERT_EQ(welcome.assign.size(), 1u);
  EXPECT_EQ(welcome.assign[0].desired_status, TaskStatus::kStopped);
  EXPECT_EQ(welcome.stop, (std::vector<StopOrder>{{"arn:t/3", "the server does not know this task"}}));
  EXPECT_EQ(welcome.heartbeat_interval_ms, 200);

  EXPECT_EQ(ParsedServer<Stop>(R"({"type":"stop","id":32,"taskArn":"arn:t/1","reason":"enough"})"),
            (Stop{32, {"arn:t/1", "enough"}}));
  EXPECT_EQ(ParsedServer<Ack>(R"({"type":"ack","id":33})"), Ack{33});
  EXPECT_EQ(ParsedServer<Error>(R"({"type":"error","message":"instance is not registered","id":34})"),
            (Error{34, "instance is not registered"}));
  // A push without an id (nothing to ack) and unknown extra fields.
  EXPECT_EQ(ParsedServer<Stop>(R"({"type":"stop","taskArn":"arn:t/1","future":{"x":[1,2]}})"), (Stop{0, {"arn:t/1", ""}}));
}

TEST(ProtocolTest, SerializedFormIsTodaysWire) {
  Json state = Json::parse(Serialize(AgentMessage(StateReport{5, SampleReport()})));
  EXPECT_EQ(state, Json::parse(R"({"type":"state","id":5,"taskArn":"arn:aws:ecs:us-east-1:000000000000:task/default/0123abcd",
      "status":"STOPPED","stopCode":"EssentialContainerExited","reason":"Essential container in task exited",
      "containers":[{"containerName":"main","status":"STOPPED","exitCode":3,"reason":"killed by signal 9"},
                    {"containerName":"side","status":"RUNNING"}]})"));
  Json hb = Json::parse(Serialize(AgentMessage(Heartbeat{6, false, {}})));
  EXPECT_EQ(hb, Json::parse(R"({"type":"heartbeat","id":6,"impaired":false,"heldGpus":[]})"));
  Json hello = Json::parse(Serialize(AgentMessage(Hello{})));
  EXPECT_EQ(hello, Json::parse(R"({"type":"hello","tasks":[],"impaired":false})"));
  Json stop = Json::parse(Serialize(ServerMessage(Stop{7, {"arn:t/1", "enough"}})));
  EXPECT_EQ(stop, Json::parse(R"({"type":"stop","id":7,"taskArn":"arn:t/1","reason":"enough"})"));
  Json assign = Json::parse(Serialize(ServerMessage(Assign{8, SampleAssignment()})));
  EXPECT_EQ(assign["task"]["containers"][0]["mps"], Json::parse(R"({"memory":4096,"maxComputePercent":50})"));
  EXPECT_FALSE(assign["task"]["containers"][1].contains("mps"));
  EXPECT_FALSE(assign["task"]["containers"][1].contains("memory"));
  EXPECT_EQ(assign["task"]["desiredStatus"], "RUNNING");
}

// The leadership epoch on welcome, assign and stop: round-trips when set, is left out of the wire when not (the
// messages read exactly as before), and a message without it parses with none.
TEST(ProtocolTest, EpochIsOptionalOnWelcomeAssignAndStop) {
  Welcome welcome{{SampleAssignment()}, {}, 200, 7};
  EXPECT_EQ(ParsedServer<Welcome>(Serialize(ServerMessage(welcome))), welcome);
  Assign assign{3, SampleAssignment(), 8};
  EXPECT_EQ(ParsedServer<Assign>(Serialize(ServerMessage(assign))), assign);
  Stop stop{4, {"arn:t/1", "enough"}, 9};
  EXPECT_EQ(ParsedServer<Stop>(Serialize(ServerMessage(stop))), stop);
  EXPECT_EQ(Json::parse(Serialize(ServerMessage(stop))),
            Json::parse(R"({"type":"stop","id":4,"taskArn":"arn:t/1","reason":"enough","epoch":9})"));
  EXPECT_FALSE(Json::parse(Serialize(ServerMessage(Welcome{}))).contains("epoch"));
  EXPECT_FALSE(Json::parse(Serialize(ServerMessage(Assign{8, SampleAssignment()}))).contains("epoch"));
  EXPECT_EQ(ParsedServer<Stop>(R"({"type":"stop","id":2,"taskArn":"arn:t/1"})").epoch, std::nullopt);
  EXPECT_EQ(ParsedServer<Assign>(R"({"type":"assign","task":{"taskArn":"a"},"epoch":12})").epoch, 12);
  EXPECT_EQ(ParsedServer<Welcome>(R"({"type":"welcome","epoch":0})").epoch, 0);
  EXPECT_FALSE(ParseServerMessage(R"({"type":"stop","taskArn":"a","epoch":"5"})").ok());
  EXPECT_EQ(ParseServerMessage(R"({"type":"assign","task":{"taskArn":"a"},"epoch":1.5})").status().message(),
            "assign.epoch must be an integer");
}

// ---- refusals ----------------------------------------------------------------------------------------------------

struct Refusal {
  const char* text;
  const char* message;
};

// gpuMemoryUsed on a heartbeat: additive (left out when absent, so the heartbeat reads as before), round-trips
// when set, and a bad one is refused alone: the heartbeat's id, impairment and held GPUs still parse.
TEST(ProtocolTest, GpuMemoryUsedIsAnOptionalBoundedPartOfTheHeartbeat) {
  Heartbeat hb{9, true, {"GPU-b"}};
  hb.gpu_memory = GpuMemoryReading{1200, {{"arn:t/1", {{"GPU-a", 5242880000}, {"GPU-b", 0}}}, {"arn:t/2", {}}}};
  EXPECT_EQ(ParsedAgent<Heartbeat>(Serialize(AgentMessage(hb))), hb);
  EXPECT_EQ(Json::parse(Serialize(AgentMessage(hb)))["gpuMemoryUsed"],
            Json::parse(R"({"ageMs":1200,"tasks":[{"taskArn":"arn:t/1","gpus":[{"gpuId":"GPU-a","bytes":5242880000},
                {"gpuId":"GPU-b","bytes":0}]},{"taskArn":"arn:t/2","gpus":[]}]})"));
  EXPECT_FALSE(Json::parse(Serialize(AgentMessage(Heartbeat{6, false, {}}))).contains("gpuMemoryUsed"));
  EXPECT_EQ(ParsedAgent<Heartbeat>(R"({"type":"heartbeat","id":1})").gpu_memory, std::nullopt);

  const std::string many_tasks = [] {
    Json tasks = Json::array();
    for (size_t i = 0; i <= kMaxGpuMemoryTasks; ++i) tasks.push_back({{"taskArn", "t" + std::to_string(i)}, {"gpus", Json::array()}});
    return Json{{"ageMs", 0}, {"tasks", tasks}}.dump();
  }();
  const std::string many_gpus = [] {
    Json gpus = Json::array();
    for (size_t i = 0; i <= kMaxGpuMemoryGpus; ++i) gpus.push_back({{"gpuId", "GPU-" + std::to_string(i)}, {"bytes", 1}});
    return Json{{"ageMs", 0}, {"tasks", {{{"taskArn", "t"}, {"gpus", gpus}}}}}.dump();
  }();
  const Refusal cases[] = {
      {R"([])", "heartbeat.gpuMemoryUsed must be an object"},
      {R"({"tasks":[]})", "heartbeat.gpuMemoryUsed.ageMs is required"},
      {R"({"ageMs":-1,"tasks":[]})", "heartbeat.gpuMemoryUsed.ageMs must be an integer from 0 to 86400000"},
      {R"({"ageMs":0})", "heartbeat.gpuMemoryUsed.tasks is required"},
      {R"({"ageMs":0,"tasks":{}})", "heartbeat.gpuMemoryUsed.tasks must be an array"},
      {R"({"ageMs":0,"tasks":[{"gpus":[]}]})", "heartbeat.gpuMemoryUsed.tasks[0].taskArn is required"},
      {R"({"ageMs":0,"tasks":[{"taskArn":"t"}]})", "heartbeat.gpuMemoryUsed.tasks[0].gpus is required"},
      {R"({"ageMs":0,"tasks":[{"taskArn":"t","gpus":[]},{"taskArn":"t","gpus":[]}]})",
       "heartbeat.gpuMemoryUsed.tasks[1].taskArn appears twice"},
      {R"({"ageMs":0,"tasks":[{"taskArn":"t","gpus":[{"gpuId":"g","bytes":"5"}]}]})",
       "heartbeat.gpuMemoryUsed.tasks[0].gpus[0].bytes must be an integer"},
      {R"({"ageMs":0,"tasks":[{"taskArn":"t","gpus":[{"gpuId":"g","bytes":1.5}]}]})",
       "heartbeat.gpuMemoryUsed.tasks[0].gpus[0].bytes must be an integer"},
      {R"({"ageMs":0,"tasks":[{"taskArn":"t","gpus":[{"gpuId":"g","bytes":-3}]}]})",
       "heartbeat.gpuMemoryUsed.tasks[0].gpus[0].bytes must be an integer from 0 to 1125899906842624"},
      {R"({"ageMs":0,"tasks":[{"taskArn":"t","gpus":[{"gpuId":"g","bytes":1},{"gpuId":"g","bytes":2}]}]})",
       "heartbeat.gpuMemoryUsed.tasks[0].gpus[1].gpuId appears twice"},
      {R"({"ageMs":0,"tasks":[{"taskArn":"","gpus":[]}]})",
       "heartbeat.gpuMemoryUsed.tasks[0].taskArn must be 1 to 256 bytes"},
      {many_tasks.c_str(), "heartbeat.gpuMemoryUsed.tasks must hold at most 1024 entries"},
      {many_gpus.c_str(), "heartbeat.gpuMemoryUsed.tasks[0].gpus must hold at most 32 entries"},
  };
  for (const auto& c : cases) {
    const std::string text =
        std::string(R"({"type":"heartbeat","id":4,"impaired":true,"heldGpus":["GPU-x"],"gpuMemoryUsed":)") + c.text + "}";
    const auto m = ParseAgentMessage(text);
    ASSERT_TRUE(m.ok()) << text;
    const auto& parsed = std::get<Heartbeat>(*m);
    EXPECT_EQ(parsed, (Heartbeat{4, true, {"GPU-x"}})) << text;
    EXPECT_EQ(parsed.gpu_memory_refused, c.message) << text;
  }
}

TEST(ProtocolTest, AgentMessageTypeErrorsNameTheField) {
  const Refusal cases[] = {
      {R"([1,2])", "messages are JSON objects with a string 'type'"},
      {R"({"type":7})", "messages are JSON objects with a string 'type'"},
      {R"({"id":1})", "messages are JSON objects with a string 'type'"},
      {R"({"type":"hello")", "the message is not valid JSON"},
      {R"({"type":"welcome"})", "unknown message type 'welcome'"},
      {R"({"type":"hello","tasks":{}})", "hello.tasks must be an array"},
      {R"({"type":"hello","impaired":"no"})", "hello.impaired must be true or false"},
      {R"({"type":"hello","tasks":[{"status":"RUNNING"}]})", "hello.tasks[0].taskArn is required"},
      {R"({"type":"hello","tasks":[{"taskArn":"a","status":"RUNNING"},{"taskArn":"b","status":"DONE"}]})",
       "hello.tasks[1].status must be PENDING, RUNNING or STOPPED"},
      {R"({"type":"hello","tasks":[7]})", "hello.tasks[0] must be an object"},
      {R"({"type":"state","taskArn":"a","status":"RUNNING"})", "state.id is required"},
      {R"({"type":"state","id":"1","taskArn":"a","status":"RUNNING"})", "state.id must be an integer"},
      {R"({"type":"state","id":1.5,"taskArn":"a","status":"RUNNING"})", "state.id must be an integer"},
      {R"({"type":"state","id":18446744073709551615,"taskArn":"a","status":"RUNNING"})", "state.id must be an integer"},
      {R"({"type":"state","id":1,"taskArn":5,"status":"RUNNING"})", "state.taskArn must be a string"},
      {R"({"type":"state","id":1,"taskArn":"a"})", "state.status is required"},
      {R"({"type":"state","id":1,"taskArn":"a","status":"RUNNING","reason":false})", "state.reason must be a string"},
      {R"({"type":"state","id":1,"taskArn":"a","status":"STOPPED","stopCode":"Because"})",
       "state.stopCode must be one of TaskFailedToStart, EssentialContainerExited, UserInitiated, "
       "ServiceSchedulerInitiated, SpotInterruption, TerminationNotice, InfrastructureHealth"},
      {R"({"type":"state","id":1,"taskArn":"a","status":"RUNNING","containers":"main"})",
       "state.containers must be an array"},
      {R"({"type":"state","id":1,"taskArn":"a","status":"RUNNING","containers":[{"containerName":"m","status":"UP"}]})",
       "state.containers[0].status must be PENDING, RUNNING or STOPPED"},
      {R"({"type":"state","id":1,"taskArn":"a","status":"RUNNING","containers":[{"status":"RUNNING"}]})",
       "state.containers[0].containerName is required"},
      {R"({"type":"state","id":1,"taskArn":"a","status":"STOPPED","containers":[{"containerName":"m","status":"STOPPED","exitCode":"1"}]})",
       "state.containers[0].exitCode must be a 32-bit integer"},
      {R"({"type":"state","id":1,"taskArn":"a","status":"STOPPED","containers":[{"containerName":"m","status":"STOPPED","exitCode":4294967296}]})",
       "state.containers[0].exitCode must be a 32-bit integer"},
      {R"({"type":"state","id":1,"taskArn":"a","status":"STOPPED","containers":[{"containerName":"m","status":"STOPPED","reason":1}]})",
       "state.containers[0].reason must be a string"},
      {R"({"type":"heartbeat"})", "heartbeat.id is required"},
      {R"({"type":"heartbeat","id":1,"impaired":0})", "heartbeat.impaired must be true or false"},
      {R"({"type":"heartbeat","id":1,"heldGpus":"GPU-0"})", "heartbeat.heldGpus must be an array of strings"},
      {R"({"type":"heartbeat","id":1,"heldGpus":["GPU-0",1]})", "heartbeat.heldGpus[1] must be a string"},
      {R"({"type":"ack"})", "ack.id is required"},
      {R"({"type":"ack","id":null})", "ack.id must be an integer"},
  };
  for (const Refusal& c : cases) {
    auto m = ParseAgentMessage(c.text);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_EQ(m.status().code(), ErrorCode::kInvalidParameter) << c.text;
    EXPECT_EQ(m.status().message(), c.message) << c.text;
  }
}

TEST(ProtocolTest, ServerMessageTypeErrorsNameTheField) {
  const Refusal cases[] = {
      {R"({"type":"hello"})", "unknown message type 'hello'"},
      {R"({"type":"welcome","assign":{}})", "welcome.assign must be an array"},
      {R"({"type":"welcome","assign":[{"cluster":"default"}]})", "welcome.assign[0].taskArn is required"},
      {R"({"type":"welcome","stop":[{"taskArn":"a","reason":3}]})", "welcome.stop[0].reason must be a string"},
      {R"({"type":"welcome","stop":[{"reason":"x"}]})", "welcome.stop[0].taskArn is required"},
      {R"({"type":"welcome","heartbeatIntervalMs":"5s"})", "welcome.heartbeatIntervalMs must be an integer"},
      {R"({"type":"assign","id":1})", "assign.task is required"},
      {R"({"type":"assign","id":"1","task":{"taskArn":"a"}})", "assign.id must be an integer"},
      {R"({"type":"assign","id":1,"task":[]})", "assign.task must be an object"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","desiredStatus":"PENDING"}})",
       "assign.task.desiredStatus must be RUNNING or STOPPED"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","cluster":1}})", "assign.task.cluster must be a string"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","taskDefinitionArn":[]}})",
       "assign.task.taskDefinitionArn must be a string"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"image":"x"}]}})",
       "assign.task.containers[0].name is required"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","essential":"yes"}]}})",
       "assign.task.containers[0].essential must be true or false"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","image":2}]}})",
       "assign.task.containers[0].image must be a string"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","gpuIds":[0]}]}})",
       "assign.task.containers[0].gpuIds[0] must be a string"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","mps":4096}]}})",
       "assign.task.containers[0].mps must be an object"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","mps":{}}]}})",
       "assign.task.containers[0].mps.memory is required"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","mps":{"memory":1,"maxComputePercent":"50"}}]}})",
       "assign.task.containers[0].mps.maxComputePercent must be a 32-bit integer"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","entryPoint":"/bin/sh"}]}})",
       "assign.task.containers[0].entryPoint must be an array of strings"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","command":[1]}]}})",
       "assign.task.containers[0].command[0] must be a string"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","environment":[{"value":"1"}]}]}})",
       "assign.task.containers[0].environment[0].name is required"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","overrideEnvironment":[{"name":"A","value":1}]}]}})",
       "assign.task.containers[0].overrideEnvironment[0].value must be a string"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","cpu":1.5}]}})",
       "assign.task.containers[0].cpu must be an integer"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","memory":"64"}]}})",
       "assign.task.containers[0].memory must be an integer"},
      {R"({"type":"assign","id":1,"task":{"taskArn":"a","containers":[{"name":"m","memoryReservation":true}]}})",
       "assign.task.containers[0].memoryReservation must be an integer"},
      {R"({"type":"stop","id":1})", "stop.taskArn is required"},
      {R"({"type":"stop","id":1,"taskArn":"a","reason":{}})", "stop.reason must be a string"},
      {R"({"type":"ack","id":"x"})", "ack.id must be an integer"},
      {R"({"type":"error"})", "error.message is required"},
      {R"({"type":"error","message":"m","id":"x"})", "error.id must be an integer"},
  };
  for (const Refusal& c : cases) {
    auto m = ParseServerMessage(c.text);
    ASSERT_FALSE(m.ok()) << c.text;
    EXPECT_EQ(m.status().code(), ErrorCode::kInvalidParameter) << c.text;
    EXPECT_EQ(m.status().message(), c.message) << c.text;
  }
}

// Nested(levels) is a heartbeat with an unknown field holding `levels` nested arrays (levels 1..levels below the
// message object, which is level 0).
std::string Nested(int levels) {
  return R"({"type":"heartbeat","id":1,"x":)" + std::string(levels, '[') + std::string(levels, ']') + "}";
}

TEST(ProtocolTest, NestingIsBoundedBeforeTheDocumentIsBuilt) {
  EXPECT_TRUE(ParseAgentMessage(Nested(kMaxJsonDepth)).ok());
  auto deep = ParseAgentMessage(Nested(kMaxJsonDepth + 1));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().message(), "messages nest at most 64 levels deep");
  // A megabyte of brackets is refused, not a stack overflow.
  auto huge = ParseServerMessage(std::string(1 << 20, '['));
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().message(), "messages nest at most 64 levels deep");
}

TEST(ProtocolTest, InvalidUtf8IsReplacedNotThrown) {
  StateReport s{1, SampleReport()};
  s.report.reason = "bad \xff\xfe bytes";
  std::string text;
  ASSERT_NO_THROW(text = Serialize(AgentMessage(s)));
  auto back = ParsedAgent<StateReport>(text);
  EXPECT_EQ(back.report.reason, "bad \xEF\xBF\xBD\xEF\xBF\xBD bytes");
  Error e{std::nullopt, "\xc3"};
  ASSERT_NO_THROW(text = Serialize(ServerMessage(e)));
}

TEST(ProtocolTest, NamesAndTheirParsersAgree) {
  for (TaskStatus s : {TaskStatus::kPending, TaskStatus::kRunning, TaskStatus::kStopped})
    EXPECT_EQ(ParseTaskStatus(Name(s)), s);
  EXPECT_EQ(std::string(Name(StopCode::kInfrastructureHealth)), "InfrastructureHealth");
  EXPECT_EQ(std::string(Name(StopCode::kTaskFailedToStart)), "TaskFailedToStart");
  EXPECT_FALSE(ParseTaskStatus("running").has_value());
  EXPECT_FALSE(ParseStopCode("").has_value());
  for (RefusalCode c : {RefusalCode::kUnknownInstance, RefusalCode::kNotLeader, RefusalCode::kUnauthorized,
                        RefusalCode::kMalformed, RefusalCode::kTooLarge, RefusalCode::kBusy, RefusalCode::kRejected,
                        RefusalCode::kServerError})
    EXPECT_EQ(ParseRefusalCode(Name(c)), c);
  EXPECT_EQ(std::string(Name(RefusalCode::kNotLeader)), "NotLeader");
  EXPECT_EQ(std::string(Name(RefusalCode::kUnknownInstance)), "UnknownInstance");
  EXPECT_FALSE(ParseRefusalCode("notleader").has_value());
}

TEST(ProtocolTest, ChannelTargetCarriesTheInstanceArn) {
  const std::string arn = "arn:aws:ecs:us-east-1:000000000000:container-instance/default/ab cd+%";
  const std::string target = ChannelTarget(arn);
  EXPECT_EQ(target.rfind(std::string(kChannelPath) + "?containerInstance=arn%3Aaws%3Aecs", 0), 0u) << target;
  EXPECT_EQ(InstanceArnFromTarget(target), arn);
  EXPECT_EQ(InstanceArnFromTarget("/agent/v1/channel?x=1&containerInstance=a%2Fb+c&y=2"), "a/b c");
  EXPECT_EQ(InstanceArnFromTarget("/agent/v1/channel"), "");
  EXPECT_EQ(InstanceArnFromTarget("/agent/v1/channel?other=1"), "");
  EXPECT_EQ(InstanceArnFromTarget("/p?containerInstance=a%4"), "a%4");  // a cut escape stays literal
}

}  // namespace
}  // namespace gpupack::protocol

// ---- field limits (protocol/field_limits.h) ------------------------------------------------------------------

namespace gpupack::protocol {
namespace {

TEST(FieldLimitsTest, AcceptsWhatRealHostsSendAndRefusesLengthAndCharactersNamingTheField) {
  EXPECT_TRUE(CheckField("i-0123456789abcdef0", kInstanceIdLimit).ok());
  EXPECT_TRUE(CheckField("p4d.24xlarge", kInstanceTypeLimit).ok());
  EXPECT_TRUE(CheckField("GPU-8c5b3f2e-9b1a-4c1d-8e2f-0123456789ab", kGpuIdLimit).ok());
  EXPECT_TRUE(CheckField("MIG-GPU-8c5b3f2e-9b1a-4c1d-8e2f-0123456789ab/1/0", kGpuIdLimit).ok());
  EXPECT_TRUE(CheckField("gpupack 1.4.0 (abc)", kAgentVersionLimit).ok());
  EXPECT_TRUE(CheckField(std::string(64, 'i'), kInstanceIdLimit).ok());

  const Status long_id = CheckField(std::string(1 << 20, 'i'), kInstanceIdLimit);
  EXPECT_EQ(long_id.code(), ErrorCode::kInvalidParameter);
  EXPECT_EQ(long_id.message(),
            "instanceIdentityDocument.instanceId must be 1 to 64 letters, digits, hyphens, underscores, periods, "
            "colons and slashes, got 1048576 bytes");
  const Status control = CheckField("g5.xlarge\nx", kInstanceTypeLimit);
  EXPECT_NE(control.message().find("got byte 0x0a at offset 9"), std::string::npos) << control.message();
  EXPECT_NE(CheckField("", kInstanceTypeLimit).message().find("got an empty value"), std::string::npos);
  EXPECT_FALSE(CheckField("a b", kGpuIdLimit).ok());
  EXPECT_FALSE(CheckField("web.1", kReportedContainerLimit).ok());  // ECS's container names: no periods
  EXPECT_FALSE(CheckField("v1\x7f", kAgentVersionLimit).ok());
  EXPECT_FALSE(CheckField("caf\xc3\xa9", kAgentVersionLimit).ok());  // ASCII only
  const Status at = CheckField(std::string(2000, 'a'), kReportedTaskArnLimit, "hello.tasks[3].taskArn");
  EXPECT_EQ(at.message().rfind("hello.tasks[3].taskArn must be 1 to 1024 printable ASCII", 0), 0u) << at.message();
}

TEST(FieldLimitsTest, TheChannelRefusesAReportOrHeartbeatThatBreaksOne) {
  auto arn = ParseAgentMessage(R"({"type":"state","id":1,"taskArn":")" + std::string(1025, 'a') +
                               R"(","status":"RUNNING"})");
  ASSERT_FALSE(arn.ok());
  EXPECT_NE(arn.status().message().find("taskArn must be 1 to 1024"), std::string::npos) << arn.status().message();
  auto name = ParseAgentMessage(
      R"({"type":"state","id":1,"taskArn":"t","status":"RUNNING","containers":[{"containerName":"a\tb","status":"RUNNING"}]})");
  ASSERT_FALSE(name.ok());
  EXPECT_NE(name.status().message().find("containerName"), std::string::npos) << name.status().message();
  auto held = ParseAgentMessage(R"({"type":"heartbeat","id":1,"heldGpus":["GPU-\u0007"]})");
  ASSERT_FALSE(held.ok());
  EXPECT_NE(held.status().message().find("heldGpus[]"), std::string::npos) << held.status().message();
  Json many = {{"type", "heartbeat"}, {"id", 1}, {"heldGpus", Json::array()}};
  for (int i = 0; i < 65; ++i) many["heldGpus"].push_back("GPU-" + std::to_string(i));
  EXPECT_FALSE(ParseAgentMessage(many.dump()).ok());
  EXPECT_TRUE(ParseAgentMessage(R"({"type":"heartbeat","id":1,"heldGpus":["GPU-1"]})").ok());
}

}  // namespace
}  // namespace gpupack::protocol

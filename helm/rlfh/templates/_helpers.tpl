{{/* ============================================================== names & labels */}}

{{- define "rlfh.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{/*
Fully qualified name. Kept to 40 characters: KubeRay appends suffixes (-head-svc, -serve-svc,
-raycluster-xxxxx, -worker-<group>-xxxxx) and Service names must stay within 63.
*/}}
{{- define "rlfh.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "rlfh.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "rlfh.selectorLabels" -}}
app.kubernetes.io/name: {{ include "rlfh.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "rlfh.labels" -}}
helm.sh/chart: {{ include "rlfh.chart" . }}
{{ include "rlfh.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: rlfh
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "rlfh.image" -}}
{{- printf "%s:%s" .Values.image.repository .Values.image.tag -}}
{{- end -}}

{{/* Names of the objects other templates refer to. */}}
{{- define "rlfh.envConfigMap" -}}{{ include "rlfh.fullname" . }}-env{{- end -}}
{{- define "rlfh.secretName" -}}{{ include "rlfh.fullname" . }}-secrets{{- end -}}
{{- define "rlfh.redisName" -}}{{ include "rlfh.fullname" . }}-redis{{- end -}}
{{- define "rlfh.rayServiceName" -}}{{ include "rlfh.fullname" . }}-reward{{- end -}}
{{- define "rlfh.rayJobName" -}}{{ include "rlfh.fullname" . }}-train{{- end -}}
{{- define "rlfh.rayClusterName" -}}{{ include "rlfh.fullname" . }}{{- end -}}
{{/* KubeRay names the RayService's Serve Service "<rayservice>-serve-svc" (port 8000). */}}
{{- define "rlfh.serveServiceName" -}}{{ include "rlfh.rayServiceName" . }}-serve-svc{{- end -}}

{{/* ============================================================== generated tables (deploy/chart_sync.py) */}}

{{- define "rlfh.generated" -}}
{{- .Files.Get "files/settings.json" -}}
{{- end -}}

{{/* A value as an env-var string: strings as they are, everything else (numbers, bools, maps) as JSON. */}}
{{- define "rlfh.fmt" -}}
{{- if kindIs "string" . -}}{{ . }}{{- else -}}{{ toJson . }}{{- end -}}
{{- end -}}

{{/* ============================================================== model / data / output locations */}}

{{- define "rlfh.uriCheck" -}}
{{- $uri := index . 0 -}}{{- $field := index . 1 -}}
{{- if and $uri (not (regexMatch "^(s3|gs)://[^/]+" $uri)) -}}
{{- fail (printf "%s = %q: must start with s3:// or gs:// followed by a bucket (or be empty)" $field $uri) -}}
{{- end -}}
{{- end -}}

{{- define "rlfh.modelPath" -}}
{{- $m := .Values.model -}}
{{- include "rlfh.uriCheck" (list $m.uri "model.uri") -}}
{{- if and $m.pvc.claimName $m.uri -}}
{{- fail "model: set model.pvc.claimName or model.uri, not both" -}}
{{- end -}}
{{- if $m.pvc.claimName -}}
{{- if $m.pvc.subPath }}/mnt/model/{{ $m.pvc.subPath }}{{ else }}/mnt/model{{ end -}}
{{- else if $m.uri -}}
/mnt/model
{{- else -}}
{{- $m.path -}}
{{- end -}}
{{- end -}}

{{- define "rlfh.promptData" -}}
{{- $d := .Values.data -}}
{{- include "rlfh.uriCheck" (list $d.uri "data.uri") -}}
{{- if and $d.pvc.claimName $d.uri -}}
{{- fail "data: set data.pvc.claimName or data.uri, not both" -}}
{{- end -}}
{{- if or $d.pvc.claimName $d.uri -}}
/mnt/data/{{ $d.file }}
{{- else -}}
{{- $d.promptData | default "" -}}
{{- end -}}
{{- end -}}

{{/* ============================================================== the environment (ConfigMap) */}}

{{/*
Typed values -> env var name. Also the error messages' "set <path> instead".
*/}}
{{- define "rlfh.typedEnv" -}}
{{- $v := .Values -}}
{{- $g := $v.actorGroups -}}
{{- $e := dict -}}
{{- $_ := set $e "MODEL_PATH" (list (include "rlfh.modelPath" .) "model.path / model.pvc / model.uri") -}}
{{- $prompt := include "rlfh.promptData" . -}}
{{- $_ := set $e "PROMPT_DATA" (list (empty $prompt | ternary nil $prompt) "data.promptData / data.pvc / data.uri") -}}
{{- $recipe := $v.train.recipe | default "" -}}
{{- if and $recipe (not (hasSuffix ".toml" $recipe)) -}}
{{- $shipped := (include "rlfh.generated" . | fromJson).recipes -}}
{{- if not (has $recipe $shipped) -}}
{{- fail (printf "train.recipe = %q: no recipe of that name in the image's recipes/ (%s); name one of them, the path of a .toml file in the pod, or \"\" for none" $recipe (join ", " $shipped)) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $e "RECIPE" (list (empty $recipe | ternary nil $recipe) "train.recipe") -}}
{{- $_ := set $e "SAVE_PATH" (list (printf "/mnt/output/%s" $v.output.savePath) "output.savePath") -}}
{{- $_ := set $e "GRANULARITY" (list $v.rewards.granularity "rewards.granularity") -}}
{{- $_ := set $e "REWARD_PLACEMENT" (list $v.rewards.placement "rewards.placement") -}}
{{- $_ := set $e "VERIFICATION_MAP" (list $v.rewards.verificationMap "rewards.verificationMap") -}}
{{- $_ := set $e "INFORMATIVE_MAP" (list $v.rewards.informativeMap "rewards.informativeMap") -}}
{{- $_ := set $e "INFO_WEIGHT" (list $v.rewards.infoWeight "rewards.infoWeight") -}}
{{- $_ := set $e "VERIFIER_BACKEND" (list $v.verifier.backend "verifier.backend") -}}
{{- $_ := set $e "MODEL_URL" (list $v.verifier.modelUrl "verifier.modelUrl") -}}
{{- $_ := set $e "ANNOTATE_MODEL" (list $v.verifier.annotateModel "verifier.annotateModel") -}}
{{- $_ := set $e "ADVANTAGE_ESTIMATOR" (list $v.train.advantageEstimator "train.advantageEstimator") -}}
{{- $_ := set $e "ACTOR_LR" (list $v.train.actorLr "train.actorLr") -}}
{{- $_ := set $e "CRITIC_LR" (list $v.train.criticLr "train.criticLr") -}}
{{- $_ := set $e "KL_COEF" (list $v.train.klCoef "train.klCoef") -}}
{{- $_ := set $e "ROLLOUT_BATCH_SIZE" (list $v.train.rolloutBatchSize "train.rolloutBatchSize") -}}
{{- $_ := set $e "N_SAMPLES_PER_PROMPT" (list $v.train.nSamplesPerPrompt "train.nSamplesPerPrompt") -}}
{{- $_ := set $e "TRAIN_BATCH_SIZE" (list $v.train.trainBatchSize "train.trainBatchSize") -}}
{{- $_ := set $e "NUM_EPISODES" (list $v.train.numEpisodes "train.numEpisodes") -}}
{{- $_ := set $e "MAX_STEPS" (list $v.train.maxSteps "train.maxSteps") -}}
{{- $_ := set $e "SAVE_STEP" (list $v.train.saveStep "train.saveStep") -}}
{{- $_ := set $e "DTYPE" (list $v.train.dtype "train.dtype") -}}
{{- $_ := set $e "ZERO_STAGE" (list $v.train.zeroStage "train.zeroStage") -}}
{{- $_ := set $e "ACTOR_NUM_NODES" (list $g.actor.numNodes "actorGroups.actor.numNodes") -}}
{{- $_ := set $e "ACTOR_NUM_GPUS_PER_NODE" (list $g.actor.numGpusPerNode "actorGroups.actor.numGpusPerNode") -}}
{{- $_ := set $e "CRITIC_NUM_NODES" (list $g.critic.numNodes "actorGroups.critic.numNodes") -}}
{{- $_ := set $e "CRITIC_NUM_GPUS_PER_NODE" (list $g.critic.numGpusPerNode "actorGroups.critic.numGpusPerNode") -}}
{{- $_ := set $e "REF_NUM_NODES" (list $g.ref.numNodes "actorGroups.ref.numNodes") -}}
{{- $_ := set $e "REF_NUM_GPUS_PER_NODE" (list $g.ref.numGpusPerNode "actorGroups.ref.numGpusPerNode") -}}
{{- $_ := set $e "ROLLOUT_BACKEND" (list $g.rollout.backend "actorGroups.rollout.backend") -}}
{{- $_ := set $e "VLLM_NUM_ENGINES" (list $g.rollout.numEngines "actorGroups.rollout.numEngines") -}}
{{- $_ := set $e "VLLM_TENSOR_PARALLEL_SIZE" (list $g.rollout.tensorParallelSize "actorGroups.rollout.tensorParallelSize") -}}
{{- $_ := set $e "VLLM_GPU_MEMORY_UTILIZATION" (list $g.rollout.gpuMemoryUtilization "actorGroups.rollout.gpuMemoryUtilization") -}}
{{- $_ := set $e "COLOCATE_ACTOR_REF" (list $g.colocateActorRef "actorGroups.colocateActorRef") -}}
{{- $_ := set $e "COLOCATE_ALL_MODELS" (list $g.colocateAllModels "actorGroups.colocateAllModels") -}}
{{- $_ := set $e "NUM_CPUS_PER_ACTOR" (list $g.numCpusPerActor "actorGroups.numCpusPerActor") -}}
{{- $_ := set $e "ACTOR_NODE_RESOURCE" (list ($g.actor.nodeResource | default "") "actorGroups.actor.nodeResource") -}}
{{- $_ := set $e "CRITIC_NODE_RESOURCE" (list ($g.critic.nodeResource | default "") "actorGroups.critic.nodeResource") -}}
{{- $_ := set $e "REF_NODE_RESOURCE" (list ($g.ref.nodeResource | default "") "actorGroups.ref.nodeResource") -}}
{{- $_ := set $e "ROLLOUT_NODE_RESOURCE" (list ($g.rollout.nodeResource | default "") "actorGroups.rollout.nodeResource") -}}
{{- $_ := set $e "PLACEMENT_STRATEGY" (list ($g.placementStrategy | default "PACK") "actorGroups.placementStrategy") -}}
{{- $_ := set $e "SERVICE_NODE_RESOURCE" (list ($v.rewardService.workers.nodeResource | default "") "rewardService.workers.nodeResource") -}}
{{- $_ := set $e "VERIFIER_REPLICAS" (list $v.rewardService.verifier.replicas "rewardService.verifier.replicas") -}}
{{- $_ := set $e "VERIFIER_NUM_CPUS" (list $v.rewardService.verifier.numCpus "rewardService.verifier.numCpus") -}}
{{- $_ := set $e "REWARD_REPLICAS" (list $v.rewardService.reward.replicas "rewardService.reward.replicas") -}}
{{- $_ := set $e "REWARD_NUM_CPUS" (list $v.rewardService.reward.numCpus "rewardService.reward.numCpus") -}}
{{- $_ := set $e "SERVE_MAX_REPLICAS" (list $v.rewardService.maxReplicas "rewardService.maxReplicas") -}}
{{- $_ := set $e "SERVE_HOST" (list "0.0.0.0" "(fixed by the chart: the Serve proxy must listen on the pod IP)") -}}
{{- $_ := set $e "SERVE_PORT" (list 8000 "(fixed by the chart: KubeRay's serve service targets 8000)") -}}
{{- if and $v.rewardService.enabled $v.trainJob.useRewardService -}}
{{- $_ := set $e "REWARD_URL" (list (printf "http://%s.%s.svc:8000%s" (include "rlfh.serveServiceName" .) .Release.Namespace (trimSuffix "/" $v.rewardService.routePrefix)) "trainJob.useRewardService (REWARD_URL points at the RayService)") -}}
{{- end -}}
{{- toJson $e -}}
{{- end -}}

{{/*
The whole non-secret environment as a JSON object {ENV: "string"}: typed values + train.env.
Fails with a message naming the value for unknown keys, duplicates, secrets and inconsistent settings.
*/}}
{{- define "rlfh.env" -}}
{{- $v := .Values -}}
{{- $gen := include "rlfh.generated" . | fromJson -}}
{{- $known := dict -}}
{{- range $gen.settings -}}{{- $_ := set $known .env . -}}{{- end -}}
{{- $typed := include "rlfh.typedEnv" . | fromJson -}}
{{- $secrets := dict "REWARD_API_TOKEN" "auth.token / auth.existingSecret" "MODEL_API_KEY" "verifier.apiKey / verifier.existingSecret" "REDIS_URL" "redis.mode / redis.external.url / redis.external.existingSecret" -}}
{{- $out := dict -}}
{{- range $k, $pair := $typed -}}
{{- /* null: not written, so the recipe's value (else RLFHConfig's default) holds */ -}}
{{- if not (kindIs "invalid" (index $pair 0)) -}}
{{- $_ := set $out $k (include "rlfh.fmt" (index $pair 0)) -}}
{{- end -}}
{{- end -}}
{{- range $k, $val := $v.train.env -}}
{{- if hasKey $secrets $k -}}
{{- fail (printf "train.env.%s: secrets do not go in the ConfigMap; set %s (stored in a Secret)" $k (get $secrets $k)) -}}
{{- else if eq $k "RAY_ADDRESS" -}}
{{- fail "train.env.RAY_ADDRESS: the job runs inside its Ray cluster and finds it by itself; remove it" -}}
{{- else if hasKey $typed $k -}}
{{- fail (printf "train.env.%s: this setting has a typed value; set %s instead" $k (index (get $typed $k) 1)) -}}
{{- else if not (hasKey $known $k) -}}
{{- fail (printf "train.env.%s is not an RLFH setting (env var names are listed by `rlfh config`)" $k) -}}
{{- end -}}
{{- $_ := set $out $k (include "rlfh.fmt" $val) -}}
{{- end -}}
{{/* cross-checks RLFHConfig makes, so that they fail at install rather than in the pod */}}
{{- $est := get $out "ADVANTAGE_ESTIMATOR" -}}
{{- if and (has $est (list "grpo" "rloo" "dr_grpo")) (hasKey $out "N_SAMPLES_PER_PROMPT") (lt (int (get $out "N_SAMPLES_PER_PROMPT")) 2) -}}
{{- fail (printf "train.advantageEstimator=%s compares samples of a prompt: set train.nSamplesPerPrompt >= 2" $est) -}}
{{- end -}}
{{- if and (eq (get $out "VERIFIER_BACKEND") "llm") (not (get $out "MODEL_URL")) -}}
{{- fail "verifier.backend=llm needs verifier.modelUrl (an OpenAI-compatible endpoint, e.g. http://vllm:8000/v1)" -}}
{{- end -}}
{{- $rs := $v.rewardService -}}
{{- if and (gt (int $rs.maxReplicas) 0) (lt (int $rs.maxReplicas) (int (max $rs.verifier.replicas $rs.reward.replicas))) -}}
{{- fail (printf "rewardService.maxReplicas = %v: must be >= rewardService.verifier.replicas and rewardService.reward.replicas (or 0: autoscaling off)" $rs.maxReplicas) -}}
{{- end -}}
{{- toJson $out -}}
{{- end -}}

{{/*
GPUs the actor groups ask for must fit the GPU worker group (fails with the arithmetic).
*/}}
{{- define "rlfh.gpuCheck" -}}
{{- $g := .Values.actorGroups -}}
{{- $actor := mul (int $g.actor.numNodes) (int $g.actor.numGpusPerNode) -}}
{{- $critic := mul (int $g.critic.numNodes) (int $g.critic.numGpusPerNode) -}}
{{- $ref := mul (int $g.ref.numNodes) (int $g.ref.numGpusPerNode) -}}
{{- $anyGpu := gt (add $actor $critic $ref) 0 -}}
{{- $rollout := 0 -}}
{{- if $anyGpu -}}{{- $rollout = mul (int $g.rollout.numEngines) (int $g.rollout.tensorParallelSize) -}}{{- end -}}
{{- $need := 0 -}}
{{- $how := "" -}}
{{- if $g.colocateAllModels -}}
{{- $need = max $actor $critic $ref $rollout -}}
{{- $how = printf "colocateAllModels: max(actor %d, critic %d, ref %d, rollout %d)" $actor $critic $ref $rollout -}}
{{- else if $g.colocateActorRef -}}
{{- $need = add (max $actor $ref) $critic $rollout -}}
{{- $how = printf "max(actor %d, ref %d) + critic %d + rollout %d" $actor $ref $critic $rollout -}}
{{- else -}}
{{- $need = add $actor $critic $ref $rollout -}}
{{- $how = printf "actor %d + critic %d + ref %d + rollout %d" $actor $critic $ref $rollout -}}
{{- end -}}
{{- $w := .Values.ray.workerGroups.gpu -}}
{{- $have := 0 -}}
{{- if $w.enabled -}}{{- $have = mul (int $w.maxReplicas) (int $w.gpusPerWorker) -}}{{- end -}}
{{- if gt $need $have -}}
{{- fail (printf "actorGroups need %d GPUs (%s) but ray.workerGroups.gpu offers %d (enabled=%v, maxReplicas %v x gpusPerWorker %v)" $need $how $have $w.enabled $w.maxReplicas $w.gpusPerWorker) -}}
{{- end -}}
{{- end -}}

{{/* ============================================================== secrets */}}

{{- define "rlfh.tokenSecretRef" -}}
{{- if .Values.auth.existingSecret -}}
{{ dict "name" .Values.auth.existingSecret "key" .Values.auth.existingSecretKey | toJson }}
{{- else -}}
{{ dict "name" (include "rlfh.secretName" .) "key" "REWARD_API_TOKEN" | toJson }}
{{- end -}}
{{- end -}}

{{- define "rlfh.apiKeySecretRef" -}}
{{- if .Values.verifier.existingSecret -}}
{{ dict "name" .Values.verifier.existingSecret "key" .Values.verifier.existingSecretKey | toJson }}
{{- else if .Values.verifier.apiKey -}}
{{ dict "name" (include "rlfh.secretName" .) "key" "MODEL_API_KEY" | toJson }}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{- define "rlfh.redisSecretRef" -}}
{{- $r := .Values.redis -}}
{{- if eq $r.mode "external" -}}
{{- if $r.external.existingSecret -}}
{{ dict "name" $r.external.existingSecret "key" $r.external.existingSecretKey | toJson }}
{{- else if $r.external.url -}}
{{ dict "name" (include "rlfh.secretName" .) "key" "REDIS_URL" | toJson }}
{{- else -}}
{{- fail "redis.mode=external needs redis.external.url or redis.external.existingSecret" -}}
{{- end -}}
{{- else if eq $r.mode "bundled" -}}
{{ dict "name" (include "rlfh.secretName" .) "key" "REDIS_URL" | toJson }}
{{- else -}}
{}
{{- end -}}
{{- end -}}

{{/* Existing secret value on upgrade, else the given value, else a new random one. */}}
{{- define "rlfh.secretValue" -}}
{{- $root := index . 0 -}}{{- $key := index . 1 -}}{{- $given := index . 2 -}}
{{- if $given -}}
{{- $given -}}
{{- else -}}
{{- $existing := lookup "v1" "Secret" $root.Release.Namespace (include "rlfh.secretName" $root) -}}
{{- if and $existing $existing.data (hasKey $existing.data $key) -}}
{{- index $existing.data $key | b64dec -}}
{{- else -}}
{{- randAlphaNum 32 -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* env entries every RLFH container gets: secrets by reference, Ray auth mode */}}
{{- define "rlfh.secretEnv" -}}
{{- if .Values.auth.enabled }}
- name: REWARD_API_TOKEN
  valueFrom:
    secretKeyRef: {{ include "rlfh.tokenSecretRef" . }}
{{- end }}
{{- $api := include "rlfh.apiKeySecretRef" . | fromJson }}
{{- if $api }}
- name: MODEL_API_KEY
  valueFrom:
    secretKeyRef: {{ toJson $api }}
{{- end }}
{{- $redis := include "rlfh.redisSecretRef" . | fromJson }}
{{- if $redis }}
- name: REDIS_URL
  valueFrom:
    secretKeyRef: {{ toJson $redis }}
{{- end }}
{{- if eq .Values.ray.auth "disabled" }}
- name: RAY_AUTH_MODE
  value: disabled
{{- end }}
{{- end -}}

{{/* ============================================================== pods */}}

{{- define "rlfh.rcloneRemote" -}}
{{- if hasPrefix "s3://" . -}}:s3:{{ trimPrefix "s3://" . }}{{- else -}}:gcs:{{ trimPrefix "gs://" . }}{{- end -}}
{{- end -}}

{{- define "rlfh.initContainers" -}}
{{- $root := . -}}
{{- $o := .Values.objectStore -}}
{{- range $what, $uri := dict "model" .Values.model.uri "data" .Values.data.uri }}
{{- if $uri }}
- name: fetch-{{ $what }}
  image: {{ $o.image }}
  args:
    - copy
    - --s3-provider={{ $o.s3Provider }}
    - --s3-env-auth
    - --gcs-env-auth
    {{- if $o.s3Endpoint }}
    - --s3-endpoint={{ $o.s3Endpoint }}
    {{- end }}
    - {{ include "rlfh.rcloneRemote" $uri | quote }}
    - /mnt/{{ $what }}
  env:
    - {name: HOME, value: /tmp}
  {{- if $o.credentialsSecret }}
  envFrom:
    - secretRef:
        name: {{ $o.credentialsSecret }}
  {{- end }}
  securityContext:
    allowPrivilegeEscalation: false
    capabilities: {drop: [ALL]}
  volumeMounts:
    - {name: {{ $what }}, mountPath: /mnt/{{ $what }}}
{{- end }}
{{- end }}
{{- end -}}

{{- define "rlfh.volumes" -}}
- name: dshm
  emptyDir: {medium: Memory, sizeLimit: {{ .Values.ray.shmSize }}}
{{- if .Values.model.pvc.claimName }}
- name: model
  persistentVolumeClaim: {claimName: {{ .Values.model.pvc.claimName }}, readOnly: true}
{{- else if .Values.model.uri }}
- name: model
  emptyDir: {}
{{- end }}
{{- if .Values.data.pvc.claimName }}
- name: data
  persistentVolumeClaim: {claimName: {{ .Values.data.pvc.claimName }}, readOnly: true}
{{- else if .Values.data.uri }}
- name: data
  emptyDir: {}
{{- end }}
- name: output
{{- if .Values.output.pvc.claimName }}
  persistentVolumeClaim: {claimName: {{ .Values.output.pvc.claimName }}}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end -}}

{{- define "rlfh.volumeMounts" -}}
- {name: dshm, mountPath: /dev/shm}
{{- if or .Values.model.pvc.claimName .Values.model.uri }}
- {name: model, mountPath: /mnt/model, readOnly: true}
{{- end }}
{{- if or .Values.data.pvc.claimName .Values.data.uri }}
- {name: data, mountPath: /mnt/data, readOnly: true}
{{- end }}
- {name: output, mountPath: /mnt/output}
{{- end -}}

{{/*
A Ray pod template. Args: dict root, kind (head|worker), group (values of the group),
component, serve (bool: expose the Serve port), gpus (int).
*/}}
{{- define "rlfh.podTemplate" -}}
{{- $root := .root -}}
{{- $v := $root.Values -}}
metadata:
  labels:
    {{- include "rlfh.selectorLabels" $root | nindent 4 }}
    app.kubernetes.io/component: {{ .component }}
    rlfh.io/ray-node: {{ .kind }}
  {{- with $v.podAnnotations }}
  annotations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
spec:
  {{- with $v.ray.serviceAccountName }}
  serviceAccountName: {{ . }}
  {{- end }}
  {{- with $v.image.pullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  securityContext:
    {{- toYaml $v.ray.podSecurityContext | nindent 4 }}
  {{- $init := include "rlfh.initContainers" $root }}
  {{- if trim $init }}
  initContainers:
    {{- $init | nindent 4 }}
  {{- end }}
  containers:
    - name: ray-{{ .kind }}
      image: {{ include "rlfh.image" $root }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      workingDir: {{ $v.image.workdir }}
      envFrom:
        - configMapRef:
            name: {{ include "rlfh.envConfigMap" $root }}
      {{- $senv := include "rlfh.secretEnv" $root }}
      {{- if trim $senv }}
      env:
        {{- $senv | nindent 8 }}
      {{- end }}
      ports:
        {{- if eq .kind "head" }}
        - {containerPort: 6379, name: gcs-server}
        - {containerPort: 8265, name: dashboard}
        - {containerPort: 10001, name: client}
        {{- end }}
        - {containerPort: 8080, name: metrics}
        {{- if .serve }}
        - {containerPort: 8000, name: serve}
        {{- end }}
      {{- $res := deepCopy (.group.resources | default dict) }}
      {{- if gt (int .gpus) 0 }}
      {{- $limits := $res.limits | default dict }}
      {{- $_ := set $limits .gpuResourceName (int .gpus) }}
      {{- $_ := set $res "limits" $limits }}
      {{- end }}
      resources:
        {{- toYaml $res | nindent 8 }}
      securityContext:
        allowPrivilegeEscalation: false
        capabilities: {drop: [ALL]}
      volumeMounts:
        {{- include "rlfh.volumeMounts" $root | nindent 8 }}
  volumes:
    {{- include "rlfh.volumes" $root | nindent 4 }}
  {{- with .group.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with .group.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{- define "rlfh.rayStartParams" -}}
{{- $p := dict -}}
{{- range $k, $val := (.extra | default dict) }}{{ $_ := set $p $k (include "rlfh.fmt" $val) }}{{ end -}}
{{- range $k, $val := (.params | default dict) }}{{ $_ := set $p $k (include "rlfh.fmt" $val) }}{{ end -}}
{{- if $p }}{{ toYaml $p }}{{ else }}{}{{ end -}}
{{- end -}}

{{/* `ray start --resources` of a worker group offering the custom resource NAME (its nodeResource), as JSON */}}
{{- define "rlfh.nodeResourceParam" -}}
{{- if . -}}{{- dict "resources" (printf "'%s'" (dict . 1 | toJson)) | toJson -}}{{- else -}}{}{{- end -}}
{{- end -}}

{{/*
Each actorGroups.*.nodeResource must be offered by an enabled worker group: Ray would otherwise keep the role's
placement group pending (the trainer refuses it too, naming the setting; this fails at install).
*/}}
{{- define "rlfh.placementCheck" -}}
{{- $offered := list -}}
{{- range $name, $w := .Values.ray.workerGroups -}}
{{- if and $w.enabled $w.nodeResource -}}{{- $offered = append $offered $w.nodeResource -}}{{- end -}}
{{- end -}}
{{- range $role := list "actor" "critic" "ref" "rollout" -}}
{{- $want := (index $.Values.actorGroups $role).nodeResource | default "" -}}
{{- if and $want (not (has $want $offered)) -}}
{{- fail (printf "actorGroups.%s.nodeResource = %s: no enabled ray.workerGroups entry has that nodeResource (enabled groups offer: %s); enable the group (e.g. ray.workerGroups.train.enabled=true) or clear the setting" $role $want (join ", " $offered | default "none")) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* spec of a RayCluster: the job/cluster shape (ray.*) */}}
{{- define "rlfh.rayClusterSpec" -}}
{{- $root := . -}}
{{- $v := .Values -}}
{{- include "rlfh.gpuCheck" . -}}
{{- include "rlfh.placementCheck" . -}}
rayVersion: {{ $v.rayVersion | quote }}
enableInTreeAutoscaling: {{ $v.ray.enableInTreeAutoscaling }}
{{- if eq $v.ray.auth "token" }}
authOptions:
  mode: token
{{- end }}
headGroupSpec:
  rayStartParams:
    {{- include "rlfh.rayStartParams" (dict "extra" (dict "dashboard-host" "0.0.0.0") "params" $v.ray.head.rayStartParams) | nindent 4 }}
  template:
    {{- include "rlfh.podTemplate" (dict "root" $root "kind" "head" "group" $v.ray.head "component" "ray-head" "serve" false "gpus" 0) | nindent 4 }}
workerGroupSpecs:
{{- range $name, $w := $v.ray.workerGroups }}
{{- if $w.enabled }}
  - groupName: {{ $name }}
    replicas: {{ $w.replicas }}
    minReplicas: {{ $w.minReplicas }}
    maxReplicas: {{ $w.maxReplicas }}
    rayStartParams:
      {{- include "rlfh.rayStartParams" (dict "extra" (include "rlfh.nodeResourceParam" $w.nodeResource | fromJson) "params" $w.rayStartParams) | nindent 6 }}
    template:
      {{- include "rlfh.podTemplate" (dict "root" $root "kind" "worker" "group" $w "component" (printf "ray-worker-%s" $name) "serve" false "gpus" (ternary 0 ($w.gpusPerWorker | default 0) (eq $name "cpu")) "gpuResourceName" ($w.gpuResourceName | default "nvidia.com/gpu")) | nindent 6 }}
{{- end }}
{{- end }}
{{- end -}}

{{/* ============================================================== Serve config */}}

{{/*
The RayService's serveConfigV2, built like reward_service.serve_config.serve_config(cfg) for the same
settings (tests/test_helm.py renders both and compares).
*/}}
{{- define "rlfh.serveConfig" -}}
{{- $gen := include "rlfh.generated" . | fromJson -}}
{{- $serve := $gen.serve -}}
{{- $env := include "rlfh.env" . | fromJson -}}
{{- $rs := .Values.rewardService -}}
{{- $args := dict -}}
{{- range $gen.settings -}}
{{- if .serve_arg -}}
{{- $_ := set $args .env (hasKey $env .env | ternary (get $env .env) .default) -}}
{{- end -}}
{{- end -}}
{{- $deps := list -}}
{{- range $pair := list (list $serve.verifier_deployment $rs.verifier) (list $serve.reward_deployment $rs.reward) -}}
{{- $d := dict "name" (index $pair 0) -}}
{{- $sz := index $pair 1 -}}
{{- if gt (int $rs.maxReplicas) 0 -}}
{{- $_ := set $d "autoscaling_config" (dict "min_replicas" $sz.replicas "max_replicas" $rs.maxReplicas "target_ongoing_requests" $serve.target_ongoing_requests) -}}
{{- else -}}
{{- $_ := set $d "num_replicas" $sz.replicas -}}
{{- end -}}
{{- $_ := set $d "ray_actor_options" (dict "num_cpus" $sz.numCpus) -}}
{{- if get $env "SERVICE_NODE_RESOURCE" -}}{{- $_ := set $d.ray_actor_options "resources" (dict (get $env "SERVICE_NODE_RESOURCE") 0.001) -}}{{- end -}}
{{- /* bounded queue: beyond it Serve answers 503 with Retry-After (reward_service.serve_config.backpressure_options) */ -}}
{{- $_ := set $d "max_ongoing_requests" (index $serve.max_ongoing_requests (index $pair 0)) -}}
{{- $_ := set $d "max_queued_requests" $serve.backpressure.max_queued_requests -}}
{{- $_ := set $d "backpressure_config" $serve.backpressure.backpressure_config -}}
{{- /* a stopping replica's checks for requests in flight (reward_service.serve_config.shutdown_options) */ -}}
{{- $_ := set $d "graceful_shutdown_wait_loop_s" $serve.shutdown.graceful_shutdown_wait_loop_s -}}
{{- $deps = append $deps $d -}}
{{- end -}}
{{- $app := dict "name" $serve.app_name "route_prefix" $rs.routePrefix "import_path" $serve.import_path "args" $args "deployments" $deps -}}
{{- $cfg := dict "proxy_location" "EveryNode" "http_options" (dict "host" (get $env "SERVE_HOST") "port" (int (get $env "SERVE_PORT"))) "applications" (list $app) -}}
{{- toYaml $cfg -}}
{{- end -}}

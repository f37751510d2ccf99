-- When the user who approved a device authorization signed in (the ID token's auth_time).
ALTER TABLE oauth_devices ADD COLUMN auth_time TEXT;
